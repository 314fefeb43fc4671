#!/usr/bin/env bash
# Creates a library or app skeleton: tools/scripts/new-project.sh libs|apps NAME TAG
set -euo pipefail
kind=$1; name=$2; tag=$3
dir=$kind/$name
mkdir -p "$dir/src"
[ -f "$dir/package.json" ] || cat > "$dir/package.json" <<JSON
{
  "name": "@weir/$name",
  "version": "0.1.0",
  "private": true,
  "main": "src/index.ts",
  "types": "src/index.ts",
  "nx": {
    "tags": ["$tag"],
    "targets": { "test": {}, "typecheck": {}, "lint": {} }
  }
}
JSON
[ -f "$dir/tsconfig.json" ] || cat > "$dir/tsconfig.json" <<JSON
{
  "extends": "../../tsconfig.base.json",
  "compilerOptions": { "baseUrl": "../.." },
  "include": ["src/**/*.ts"]
}
JSON
[ -f "$dir/jest.config.js" ] || cat > "$dir/jest.config.js" <<JS
module.exports = require('../../jest.preset.js')(__dirname);
JS
[ -f "$dir/eslint.config.mjs" ] || cat > "$dir/eslint.config.mjs" <<JS
import base from '../../eslint.config.mjs';
export default [...base];
JS
