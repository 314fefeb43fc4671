import { defaultConfig, parseConfig } from '@weir/config';
import { defaultConfigFile } from './default-config-file';

describe('defaultConfigFile', () => {
  it('parses to exactly defaultConfig()', () => {
    expect(parseConfig(JSON.stringify(defaultConfigFile()), 'default', { format: 'json' })).toEqual(defaultConfig());
  });

  it('is a fresh object each time', () => {
    expect(defaultConfigFile()).not.toBe(defaultConfigFile());
  });
});
