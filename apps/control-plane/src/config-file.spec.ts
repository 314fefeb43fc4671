import { EnvError } from '@weir/service-runtime';
import { parseConfigImportMode } from './config-file';

describe('parseConfigImportMode (WEIR_CONFIG_IMPORT)', () => {
  it.each([
    ['empty', 'empty'],
    ['placement', 'placement'],
    [' Always ', 'always'],
  ])('reads %j as %s', (value, mode) => {
    expect(parseConfigImportMode(value)).toBe(mode);
  });

  it('refuses anything else, naming the variable and the choices', () => {
    expect(() => parseConfigImportMode('sometimes')).toThrow(EnvError);
    expect(() => parseConfigImportMode('sometimes')).toThrow(/WEIR_CONFIG_IMPORT: expected one of empty, placement, always/);
  });
});
