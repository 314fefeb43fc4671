import { UsageError } from '../args';
import { applyLimits, limitsFromFlags, parseDay, parseList, parseOnOff, parseWeights, readObjectFile } from './command';

const usage = (fn: () => unknown): string => {
  try {
    fn();
  } catch (error) {
    if (error instanceof UsageError) return error.message;
    throw error;
  }
  throw new Error('expected a usage error');
};

describe('parseWeights', () => {
  it.each([
    ['rev1=90,rev2=10', [{ revision: 'rev1', weight: 90 }, { revision: 'rev2', weight: 10 }]],
    ['tiny@1=100', [{ revision: 'tiny@1', weight: 100 }]],
    [' a=0.5 , b=99.5 ', [{ revision: 'a', weight: 0.5 }, { revision: 'b', weight: 99.5 }]],
    ['org/model:v1=0,b=1', [{ revision: 'org/model:v1', weight: 0 }, { revision: 'b', weight: 1 }]],
  ])('%j', (raw, expected) => {
    expect(parseWeights(raw)).toEqual(expected);
  });

  it.each([
    ['', '--weights: expected revision=weight pairs such as rev1=90,rev2=10, got "" in ""'],
    ['rev1', '--weights: expected revision=weight pairs such as rev1=90,rev2=10, got "rev1" in "rev1"'],
    ['rev1=90,', '--weights: expected revision=weight pairs such as rev1=90,rev2=10, got "" in "rev1=90,"'],
    ['a=b=1', '--weights: expected revision=weight pairs such as rev1=90,rev2=10, got "a=b=1" in "a=b=1"'],
    ['a=-1', '--weights: expected a number ≥ 0, written in decimal digits (e.g. 16, 0.5, 1e3), got "-1"'],
    ['a=0x10', '--weights: expected a number ≥ 0, written in decimal digits (e.g. 16, 0.5, 1e3), got "0x10"'],
    ['a=1,a=2', '--weights: revision "a" appears twice'],
  ])('%j is refused', (raw, message) => {
    expect(usage(() => parseWeights(raw))).toBe(message);
  });
});

describe('limit flags', () => {
  it('maps each flag to its configuration field, with none removing it', () => {
    const change = limitsFromFlags({ 'max-concurrent': '8', 'monthly-budget-usd': '99.5', 'requests-per-minute': 'none', name: 'ignored', json: true });
    expect(change).toEqual({ set: { max_concurrent: 8, monthly_budget_usd: 99.5 }, remove: ['requests_per_minute'] });
    expect(applyLimits({ requests_per_minute: 60, tokens_per_minute: 1000, max_concurrent: 2 }, change)).toEqual({ tokens_per_minute: 1000, max_concurrent: 8, monthly_budget_usd: 99.5 });
    expect(applyLimits(undefined, change)).toEqual({ max_concurrent: 8, monthly_budget_usd: 99.5 });
  });

  it.each([
    [{ 'max-concurrent': '0' }, '--max-concurrent: expected an integer ≥ 1, got "0"'],
    [{ 'tokens-per-minute': '1.5' }, '--tokens-per-minute: expected an integer ≥ 1, got "1.5"'],
    [{ 'daily-budget-usd': '-3' }, '--daily-budget-usd: expected a number ≥ 0, written in decimal digits (e.g. 16, 0.5, 1e3), got "-3"'],
  ])('refuses %j', (flags, message) => {
    expect(usage(() => limitsFromFlags(flags))).toBe(message);
  });
});

describe('small values', () => {
  it.each([
    ['on', true],
    ['true', true],
    ['off', false],
    ['false', false],
  ])('parseOnOff(%j)', (raw, expected) => {
    expect(parseOnOff('state', raw)).toBe(expected);
  });

  it('refuses other switches, impossible days and empty list items', () => {
    expect(usage(() => parseOnOff('state', 'yes'))).toBe('state: expected on or off, got "yes"');
    expect(parseDay('retires-on', '2031-02-28')).toBe('2031-02-28');
    expect(usage(() => parseDay('retires-on', '2031-02-30'))).toBe('--retires-on: expected a UTC date YYYY-MM-DD such as 2030-01-31, got "2031-02-30"');
    expect(usage(() => parseDay('retires-on', '31/01/2031'))).toBe('--retires-on: expected a UTC date YYYY-MM-DD such as 2030-01-31, got "31/01/2031"');
    expect(parseList('fallbacks', 'a, b')).toEqual(['a', 'b']);
    expect(usage(() => parseList('fallbacks', 'a,,b'))).toBe('--fallbacks: expected a comma-separated list such as a,b, got "a,,b"');
  });
});

describe('readObjectFile', () => {
  const files: Record<string, string> = {
    'p.yaml': 'limits:\n  max_concurrent: 4\ncontent_logging: false\n',
    'p.json': '{"limits": {"max_concurrent": 4}, "content_logging": false}',
    'list.yaml': '- a\n- b\n',
    'bad.yaml': 'limits: [1, 2\n',
  };
  const read = (p: string) => {
    if (!(p in files)) throw new Error(`ENOENT: no such file or directory, open '${p}'`);
    return files[p];
  };

  it('reads one object from JSON or YAML', () => {
    const expected = { limits: { max_concurrent: 4 }, content_logging: false };
    expect(readObjectFile('file', 'p.yaml', read)).toEqual(expected);
    expect(readObjectFile('file', 'p.json', read)).toEqual(expected);
  });

  it.each([
    ['missing.yaml', "--file: cannot read missing.yaml: ENOENT: no such file or directory, open 'missing.yaml'"],
    ['list.yaml', '--file: list.yaml must hold one object (a mapping), not a list'],
  ])('refuses %s', (file, message) => {
    expect(usage(() => readObjectFile('file', file, read))).toBe(message);
  });

  it('refuses a file that does not parse, naming it', () => {
    expect(usage(() => readObjectFile('file', 'bad.yaml', read))).toMatch(/^--file: bad\.yaml is neither JSON nor YAML: /);
  });
});
