#!/usr/bin/env sh
# Regenerates libs/proto/src/gen from proto/ with the local buf and protoc-gen-es (offline).
# Usage (from anywhere): proto/generate.sh
# The generated code is committed; libs/proto/src/generated.spec.ts fails when it is stale.
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
node_modules/.bin/buf lint proto
node_modules/.bin/buf generate proto --template proto/buf.gen.yaml
