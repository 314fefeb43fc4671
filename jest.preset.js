// Shared jest settings for every project: swc transform (typecheck runs in `nx typecheck`),
// `@weir/*` mapped to each library's single public door, node environment.
const path = require('node:path');

/** @param {string} projectDir absolute path of the project */
module.exports = function preset(projectDir) {
  return {
    rootDir: projectDir,
    testEnvironment: 'node',
    testMatch: ['<rootDir>/**/*.spec.ts'],
    testPathIgnorePatterns: ['/node_modules/', '/dist/'],
    moduleFileExtensions: ['ts', 'js', 'mjs', 'cjs', 'json'],
    moduleNameMapper: {
      '^@weir/(.*)$': path.join(__dirname, 'libs/$1/src/index.ts'),
    },
    transform: {
      '^.+\\.(t|j)s$': [
        '@swc/jest',
        {
          jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
          module: { type: 'commonjs', ignoreDynamic: true },
        },
      ],
    },
    testTimeout: 30000,
  };
};
