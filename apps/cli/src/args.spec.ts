import { CAPACITY_HELP, LIMITS, numberFlag, parseCommandLine, parseDecodePoints, UsageError } from './args';

const seedFlags = ['--rps', '100', '--input', '2000', '--output', '300', '--replica-tps', '2500', '--util', '0.7', '--n-plus', '1'];

const usageError = (argv: string[]): string => {
  try {
    parseCommandLine(argv);
  } catch (e) {
    if (e instanceof UsageError) return e.message;
    throw e;
  }
  throw new Error(`no error for ${argv.join(' ')}`);
};

describe('parseCommandLine', () => {
  it('reads the seed’s capacity flags', () => {
    expect(parseCommandLine(['capacity', ...seedFlags])).toEqual({
      command: 'capacity',
      rps: 100,
      inputTokens: 2000,
      outputTokens: 300,
      replicaTokensPerSecond: 2500,
      utilization: 0.7,
      nPlus: 1,
      json: false,
    });
  });

  it('defaults --util to 0.7 and --n-plus to 1', () => {
    expect(parseCommandLine(['capacity', '--rps', '1', '--input', '0', '--output', '1', '--replica-tps', '10'])).toMatchObject({ utilization: 0.7, nPlus: 1 });
  });

  it('reads the simulation flags, with the example profile as defaults', () => {
    const c = parseCommandLine(['capacity', '--simulate', '--rps', '100', '--input', '2000', '--output', '300', '--output-p95', '900', '--seed', '3']);
    expect(c).toMatchObject({
      command: 'capacity',
      simulate: {
        profile: { prefillTokensPerSecond: 10_000, decodeStepMs: [[1, 20], [32, 40]], kvTokens: 65_536, maxSequences: 32 },
        inputTokens: { kind: 'fixed', value: 2000 },
        outputTokens: { kind: 'lognormal', p50: 300, p95: 900 },
        durationSeconds: 60,
        seed: 3,
        ttftP95Ms: 1000,
        tpotP95Ms: 50,
        maxReplicas: 1000,
      },
    });
    expect(c).not.toHaveProperty('replicaTokensPerSecond');
  });

  it('reads sample lists and a custom profile', () => {
    const c = parseCommandLine([
      'capacity', '--simulate', '--rps', '5', '--input', '100', '--output', '50', '--input-samples', '80,120',
      '--decode-ms', '1:10,8:12,64:30', '--kv-tokens', '4096', '--max-seqs', '64', '--prefill-tps', '5000', '--max-output', '256',
    ]);
    expect(c).toMatchObject({
      simulate: {
        inputTokens: { kind: 'samples', values: [80, 120] },
        profile: { decodeStepMs: [[1, 10], [8, 12], [64, 30]], kvTokens: 4096, maxSequences: 64, prefillTokensPerSecond: 5000 },
        maxOutputTokens: 256,
      },
    });
  });

  it.each([
    [['capacity', '--help'], { command: 'help', topic: 'capacity' }],
    [['--help'], { command: 'help' }],
    [[], { command: 'help' }],
  ])('%j is help', (argv, expected) => {
    expect(parseCommandLine(argv)).toEqual(expected);
  });

  it.each([
    [['capacity', ...seedFlags, '--bogus', '1'], '--bogus: unknown flag'],
    [['capacity', '--rps', 'lots', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps: expected a number > 0 and ≤ 1,000,000, written in decimal digits'],
    [['capacity', '--rps', '1', '--input', '1', '--output', '0', '--replica-tps', '1'], '--output: expected an integer ≥ 1'],
    [['capacity', '--rps', '1', '--input', '1.5', '--output', '1', '--replica-tps', '1'], '--input: expected an integer ≥ 0'],
    [['capacity', '--rps', '1', '--input', '1', '--output', '1'], '--replica-tps: required without --simulate'],
    [['capacity', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps: required'],
    [['capacity', ...seedFlags.slice(0, 8), '--util', '70'], '--util: expected a number ≥ 0.01 and ≤ 1, got "70"'],
    [['capacity', ...seedFlags.slice(0, 8), '--n-plus', '-1'], '--n-plus: needs a value'],
    [['capacity', ...seedFlags.slice(0, 8), '--n-plus=-1'], '--n-plus: expected an integer ≥ 0 and ≤ 1,000, written in decimal digits (e.g. 16, 1e3), got "-1"'],
    [['capacity', ...seedFlags, '--rps'], '--rps: needs a value'],
    [['capacity', ...seedFlags, '--json=yes'], '--json: takes no value'],
    [['capacity', ...seedFlags, 'extra'], 'extra: unexpected argument'],
    [['capacity', ...seedFlags, '--kv-tokens', '10'], '--kv-tokens: only meaningful with --simulate'],
    [['capacity', '--simulate', ...seedFlags, '--decode-ms', '32:40,1:20'], '--decode-ms: batches must increase'],
    [['capacity', '--simulate', ...seedFlags, '--output-p95', '100'], '--output-p95: expected a number ≥ 300'],
    [['capacity', '--simulate', ...seedFlags, '--output-samples', '1,x'], '--output-samples: expected an integer ≥ 1 and ≤ 10,000,000, written in decimal digits (e.g. 16, 1e3), got "x"'],
    [['capacity', '--simulate', ...seedFlags, '--output-samples', '1', '--output-p95', '900'], '--output-p95 and --output-samples'],
    [['plan'], 'plan: unknown command'],
    [['--rps', '1'], '--rps: unknown flag'],
  ])('rejects %j naming the flag', (argv, message) => {
    expect(usageError(argv as string[])).toContain(message);
  });

  // The tester's reports: each was accepted and printed Infinity, NaN or a negative count.
  const flags = (patch: Record<string, string>): string[] => {
    const base: Record<string, string> = { rps: '100', input: '2000', output: '300', 'replica-tps': '2500', util: '0.7', 'n-plus': '1', ...patch };
    return ['capacity', ...Object.entries(base).flatMap(([k, v]) => [`--${k}`, v])];
  };
  const simulate = (patch: Record<string, string>): string[] => {
    const base: Record<string, string> = { rps: '100', input: '2000', output: '300', ...patch };
    return ['capacity', '--simulate', ...Object.entries(base).flatMap(([k, v]) => [`--${k}`, v])];
  };
  it.each([
    [flags({ rps: '1e300' }), '--rps: expected a number > 0 and ≤ 1,000,000, got "1e300"'],
    [flags({ rps: '1000001' }), '--rps: expected a number > 0 and ≤ 1,000,000'],
    [flags({ rps: '1e999' }), '--rps: expected a number > 0 and ≤ 1,000,000, got "1e999"'],
    [flags({ 'replica-tps': '1e-300' }), '--replica-tps: expected a number ≥ 0.001 and ≤ 1,000,000,000, got "1e-300"'],
    [flags({ 'replica-tps': '2e9' }), '--replica-tps: expected a number ≥ 0.001 and ≤ 1,000,000,000'],
    [flags({ util: '1e-300' }), '--util: expected a number ≥ 0.01 and ≤ 1'],
    [flags({ 'n-plus': '1e12' }), '--n-plus: expected an integer ≥ 0 and ≤ 1,000, got "1e12"'],
    [flags({ 'n-plus': '1001' }), '--n-plus: expected an integer ≥ 0 and ≤ 1,000'],
    [flags({ input: '10000001' }), '--input: expected an integer ≥ 0 and ≤ 10,000,000'],
    [flags({ output: '1e8' }), '--output: expected an integer ≥ 1 and ≤ 10,000,000'],
    [simulate({ 'output-p95': '1e8' }), '--output-p95: expected a number ≥ 300 and ≤ 10,000,000'],
    [simulate({ 'input-samples': '10,2e7' }), '--input-samples: expected an integer ≥ 1 and ≤ 10,000,000'],
    [simulate({ 'max-output': '1e8' }), '--max-output: expected an integer ≥ 1 and ≤ 10,000,000'],
    [simulate({ 'prefill-tps': '1e-300' }), '--prefill-tps: expected a number ≥ 1 and ≤ 1,000,000,000'],
    [simulate({ 'decode-ms': '1:0.0000001' }), '--decode-ms: expected batch:ms pairs'],
    [simulate({ 'decode-ms': '1:20,1000000:40' }), 'batch an integer in [1, 100,000]'],
    [simulate({ 'kv-tokens': '1e10' }), '--kv-tokens: expected an integer ≥ 1 and ≤ 1,000,000,000'],
    [simulate({ 'max-seqs': '1e9' }), '--max-seqs: expected an integer ≥ 1 and ≤ 100,000'],
    [simulate({ duration: '100000' }), '--duration: expected a number > 0 and ≤ 86,400, got "100000"'],
    [simulate({ seed: '1e300' }), '--seed: expected an integer ≥ 0 and ≤ 4,294,967,295'],
    [simulate({ 'ttft-p95-ms': '1e300' }), '--ttft-p95-ms: expected a number > 0 and ≤ 3,600,000'],
    [simulate({ 'tpot-p95-ms': '1e300' }), '--tpot-p95-ms: expected a number > 0 and ≤ 60,000'],
    [simulate({ 'max-replicas': '1e9' }), '--max-replicas: expected an integer ≥ 1 and ≤ 10,000'],
  ])('bounds every numeric flag: %j', (argv, message) => {
    expect(usageError(argv)).toContain(message);
  });

  it('accepts the bounds themselves', () => {
    expect(parseCommandLine(flags({ rps: '1e6', 'replica-tps': '0.001', util: '0.01', 'n-plus': '1000', output: '1e7' }))).toMatchObject({
      rps: 1e6,
      replicaTokensPerSecond: 0.001,
      utilization: 0.01,
      nPlus: 1000,
      outputTokens: 1e7,
    });
  });

  it.each(['0x10', '0o10', '0b10', '0X1F', '', ' ', ' 16', '16 ', '+16', '-0', '1_000', 'Infinity', 'NaN', '.5', '5.', '1e', '1,000'])(
    'reads only decimal numbers: --rps %j is refused',
    (raw) => {
      // Number('0x10') is 16 and Number(' ') is 0: both were accepted before (as 16 and as an empty value).
      expect(usageError(['capacity', `--rps=${raw}`, '--input', '1', '--output', '1', '--replica-tps', '1'])).toMatch(/^--rps: expected a number > 0 and ≤ 1,000,000/);
    },
  );

  it.each([
    ['16', 16],
    ['0.5', 0.5],
    ['1e3', 1000],
    ['2.5E-1', 0.25],
    ['007', 7],
  ])('reads the decimal %j as %d', (raw, value) => {
    expect(numberFlag('rps', raw, { exclusiveMin: 0 })).toBe(value);
  });

  it.each([
    [['capacity', ...seedFlags, '--rps', '5'], '--rps given twice'],
    [['capacity', '--rps=100', '--rps=5', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps given twice'],
    [['capacity', ...seedFlags, '--json', '--json'], '--json given twice'],
    [['capacity', '--simulate', '--simulate', '--rps', '1', '--input', '1', '--output', '1'], '--simulate given twice'],
  ])('refuses a repeated flag instead of keeping the last: %j', (argv, message) => {
    expect(usageError(argv)).toBe(`${message}: give each flag once`);
  });

  it('still shows help when --help comes with a repeated flag', () => {
    expect(parseCommandLine(['capacity', '--rps', '1', '--rps', '2', '--help'])).toEqual({ command: 'help', topic: 'capacity' });
  });

  it('documents the ranges in --help', () => {
    expect(LIMITS).toMatchObject({ maxRps: 1e6, minReplicaTps: 1e-3, maxNPlus: 1000, maxTokens: 1e7, maxDurationSeconds: 86_400, maxReplicas: 10_000 });
    for (const range of ['((0, 1e6]', 'integer [0, 1e7]', 'integer [1, 1e7]', '([0.001, 1e9]', '[0.01, 1]', 'integer [0, 1000]', '((0, 86400]', 'integer [1, 10000]', '20 to 100,000 arrivals', '5,000,000']) {
      expect(CAPACITY_HELP).toContain(range);
    }
  });
});

describe('parseDecodePoints', () => {
  it('reads batch:ms pairs', () => {
    expect(parseDecodePoints('1:20, 32:40.5')).toEqual([
      [1, 20],
      [32, 40.5],
    ]);
  });
  it.each(['', '1-20', '0:20', '1:0', '1:20,1:30', '0x1:20', '1:0x14', '1:1e9', '100001:20'])('rejects %j', (raw) => {
    expect(() => parseDecodePoints(raw)).toThrow(/--decode-ms/);
  });
});
