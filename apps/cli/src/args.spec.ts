import { parseCommandLine, parseDecodePoints, UsageError } from './args';

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
    [['capacity', '--rps', 'lots', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps: expected a number > 0, got "lots"'],
    [['capacity', '--rps', '1', '--input', '1', '--output', '0', '--replica-tps', '1'], '--output: expected an integer ≥ 1'],
    [['capacity', '--rps', '1', '--input', '1.5', '--output', '1', '--replica-tps', '1'], '--input: expected an integer ≥ 0'],
    [['capacity', '--rps', '1', '--input', '1', '--output', '1'], '--replica-tps: required without --simulate'],
    [['capacity', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps: required'],
    [['capacity', ...seedFlags, '--util', '70'], '--util: expected a number > 0 and ≤ 1, got "70"'],
    [['capacity', ...seedFlags, '--n-plus', '-1'], '--n-plus: needs a value'],
    [['capacity', ...seedFlags, '--n-plus=-1'], '--n-plus: expected an integer ≥ 0, got "-1"'],
    [['capacity', ...seedFlags, '--rps'], '--rps: needs a value'],
    [['capacity', ...seedFlags, '--json=yes'], '--json: takes no value'],
    [['capacity', ...seedFlags, 'extra'], 'extra: unexpected argument'],
    [['capacity', ...seedFlags, '--kv-tokens', '10'], '--kv-tokens: only meaningful with --simulate'],
    [['capacity', '--simulate', ...seedFlags, '--decode-ms', '32:40,1:20'], '--decode-ms: batches must increase'],
    [['capacity', '--simulate', ...seedFlags, '--output-p95', '100'], '--output-p95: expected a number ≥ 300'],
    [['capacity', '--simulate', ...seedFlags, '--output-samples', '1,x'], '--output-samples: expected an integer ≥ 1, got "x"'],
    [['capacity', '--simulate', ...seedFlags, '--output-samples', '1', '--output-p95', '900'], '--output-p95 and --output-samples'],
    [['plan'], 'plan: unknown command'],
    [['--rps', '1'], '--rps: unknown flag'],
  ])('rejects %j naming the flag', (argv, message) => {
    expect(usageError(argv as string[])).toContain(message);
  });
});

describe('parseDecodePoints', () => {
  it('reads batch:ms pairs', () => {
    expect(parseDecodePoints('1:20, 32:40.5')).toEqual([
      [1, 20],
      [32, 40.5],
    ]);
  });
  it.each(['', '1-20', '0:20', '1:0', '1:20,1:30'])('rejects %j', (raw) => {
    expect(() => parseDecodePoints(raw)).toThrow(/--decode-ms/);
  });
});
