import base from '../../eslint.config.mjs';

// Specs may use the shared test kit (`@weir/testing`: contract suites, scripted engine);
// production code of this adapter library may not.
export default [
  ...base,
  {
    files: ['**/*.spec.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          allow: [],
          enforceBuildableLibDependency: false,
          depConstraints: [
            { sourceTag: 'type:adapter', onlyDependOnLibsWithTags: ['type:core', 'type:domain', 'type:adapter', 'type:proto', 'type:testing'] },
          ],
        },
      ],
    },
  },
];
