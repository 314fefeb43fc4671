import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { flagOfField, runCli } from './run';

const capture = () => {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (t: string) => out.push(t), err: (t: string) => err.push(t) }, out, err };
};
const seedFlags = ['--rps', '100', '--input', '2000', '--output', '300', '--replica-tps', '2500', '--util', '0.7', '--n-plus', '1'];

describe('runCli', () => {
  it('prints the seed’s sizing with its arithmetic', () => {
    const c = capture();
    expect(runCli(['capacity', ...seedFlags], c.io)).toBe(0);
    const text = c.out.join('');
    expect(text).toContain('ceil(30,000 / 1,750) = 18 replicas');
    expect(text).toContain('answer:   19 replicas');
    expect(c.err).toEqual([]);
  });

  it('prints JSON with --json', () => {
    const c = capture();
    expect(runCli(['capacity', ...seedFlags, '--json'], c.io)).toBe(0);
    expect(JSON.parse(c.out.join(''))).toMatchObject({ plan: { replicas: 18, replicasWithFailures: 19 } });
  });

  it('prints simulated percentiles and the answer with --simulate', () => {
    const c = capture();
    const argv = ['capacity', '--simulate', '--rps', '10', '--input', '500', '--output', '100', '--duration', '10', '--n-plus', '1'];
    expect(runCli(argv, c.io)).toBe(0);
    const text = c.out.join('');
    expect(text).toMatch(/answer: \d+ replicas meet the targets; \d+ with N\+1/);
    expect(text).toMatch(/TTFT +p50 [\d.,]+ ms, p95 [\d.,]+ ms, p99 [\d.,]+ ms/);
    expect(text).toMatch(/binding constraint: (prefill|kv memory|decode)/);
    expect(text).not.toContain('throughput plan');
  });

  it('exits 1 when no fleet up to --max-replicas meets the targets', () => {
    const c = capture();
    // The answer is 9 replicas (lower bound 6): 6 and 8 are tried and miss.
    const argv = ['capacity', '--simulate', '--rps', '10', '--input', '2000', '--output', '300', '--duration', '10', '--tpot-p95-ms', '30', '--max-replicas', '8'];
    expect(runCli(argv, c.io)).toBe(1);
    const text = c.out.join('');
    expect(text).toContain('tried: 6 misses, 8 misses');
    expect(text).toContain('answer: none up to --max-replicas 8 met the targets');
    expect(text).toContain('largest tried: 8 replicas');
  });

  it.each([
    [['--tpot-p95-ms', '5'], 'none at any fleet size: every token after the first takes at least the fastest decode step, 20 ms (--decode-ms), above --tpot-p95-ms 5'],
    [['--input', '5000', '--ttft-p95-ms', '100'], 'none at any fleet size: even with no queueing, p95 TTFT is at least 520 ms'],
    [['--input', '70000'], "none at any fleet size: 51 requests need more KV memory (input + output limit) than a replica's 65,536 tokens; raise --kv-tokens"],
  ])('exits 1 after one run when no fleet size can meet the targets (%j)', (extra, answer) => {
    const c = capture();
    const base: Record<string, string> = { '--rps': '10', '--input': '500', '--output': '100', '--duration': '5' };
    for (let i = 0; i < extra.length; i += 2) base[extra[i]] = extra[i + 1];
    expect(runCli(['capacity', '--simulate', ...Object.entries(base).flat()], c.io)).toBe(1);
    const text = c.out.join('');
    expect(text).toMatch(/tried: \d+ misses\n/);
    expect(text).toContain(`answer: ${answer}`);
  });

  it('exits 2 naming the flag for bad usage, and documents every flag in help', () => {
    const c = capture();
    expect(runCli(['capacity', '--rps', '0', '--input', '1', '--output', '1', '--replica-tps', '1'], c.io)).toBe(2);
    expect(c.err.join('')).toContain('--rps');
    const help = capture();
    expect(runCli(['capacity', '--help'], help.io)).toBe(0);
    for (const flag of ['--rps', '--input', '--output', '--replica-tps', '--util', '--n-plus', '--simulate', '--prefill-tps', '--decode-ms', '--kv-tokens', '--max-seqs', '--duration', '--seed', '--output-p95', '--input-p95', '--json', '--max-replicas', '--ttft-p95-ms', '--tpot-p95-ms', '--max-output', '--input-samples', '--output-samples']) {
      expect(help.out.join('')).toContain(flag);
    }
  });

  describe('the tester’s reports', () => {
    const run = (argv: string[]) => {
      const c = capture();
      const status = runCli(['capacity', ...argv], c.io);
      return { status, out: c.out.join(''), err: c.err.join('') };
    };

    it.each([
      [['--rps', '1e300', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps: expected a number > 0 and ≤ 1,000,000, got "1e300"'],
      [['--rps', '1', '--input', '1', '--output', '1', '--replica-tps', '1e-300'], '--replica-tps: expected a number ≥ 0.001'],
      [['--rps', '100', '--input', '2000', '--output', '300', '--replica-tps', '2500', '--n-plus', '1e12'], '--n-plus: expected an integer ≥ 0 and ≤ 1,000'],
      [['--rps', '0x10', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps: expected a number > 0 and ≤ 1,000,000, written in decimal digits'],
      [['--rps', '100', '--rps', '5', '--input', '1', '--output', '1', '--replica-tps', '1'], '--rps given twice'],
    ])('exit 2 naming the flag and its range, nothing printed: %j', (argv, message) => {
      const r = run(argv);
      expect(r.status).toBe(2);
      expect(r.err).toContain(`weir: ${message}`);
      expect(r.out).toBe('');
    });

    it('refuses flags in range whose plan would exceed 10^9 replicas, naming them', () => {
      const r = run(['--rps', '1e6', '--input', '1', '--output', '1e7', '--replica-tps', '0.001', '--util', '0.01']);
      expect(r.status).toBe(2);
      expect(r.err).toContain('--rps 1,000,000 × --output 10,000,000 ÷ (--replica-tps 0.001 × --util 0.01) needs about 1.00e+18 replicas, more than the 1,000,000,000');
    });

    it('prints only finite numbers at the extremes of every range', () => {
      const r = run(['--rps', '1e6', '--input', '1e7', '--output', '1', '--replica-tps', '1e9', '--util', '0.01', '--n-plus', '1000', '--json']);
      expect(r.status).toBe(0);
      const numbers: number[] = [];
      JSON.parse(r.out, (_k, v: unknown) => (typeof v === 'number' ? numbers.push(v) : undefined, v));
      expect(numbers.length).toBeGreaterThan(10);
      expect(numbers.every((n) => Number.isFinite(n) && n >= 0)).toBe(true);
    });

    it('an N+k larger than the throughput count loses all of them, never a negative count', () => {
      const r = run([...seedFlags.slice(0, 10), '--n-plus', '1000']);
      expect(r.status).toBe(0);
      expect(r.out).toContain('18 replicas losing 1000 leave none: 0 tokens/s < 30,000: short');
      expect(r.out).toContain('1018 replicas losing 1000 leave 18 × 2,500 × 0.7 = 31,500 tokens/s ≥ 30,000: enough');
      expect(r.out).not.toMatch(/leave -/);
    });

    it('--simulate at 0.001 rps: says the window holds (almost) no arrivals and which --duration would do', () => {
      // Was: 11 runs of an empty window, then "none up to --max-replicas 1000 met the targets", exit 1.
      const r = run(['--simulate', '--rps', '0.001', '--input', '100', '--output', '10']);
      expect(r.status).toBe(2);
      expect(r.err).toContain(
        'weir: --duration: a 60 s window at --rps 0.001 expects 0.06 arrivals (it may hold none), fewer than the 20 a p95 needs: give --duration 20,000 or longer (at most 86,400)',
      );
      const longer = run(['--simulate', '--rps', '0.001', '--input', '100', '--output', '10', '--duration', '20000']);
      expect(longer.status).toBe(0);
      expect(longer.out).toContain('answer: 1 replicas meet the targets');
    });

    it('--simulate below 20 arrivals a day: too low to simulate at all', () => {
      const r = run(['--simulate', '--rps', '0.0001', '--input', '100', '--output', '10']);
      expect(r.status).toBe(2);
      expect(r.err).toContain('--rps 0.0001: too low to simulate: even the longest window (--duration 86,400) expects 8.64 arrivals');
    });

    it('--simulate --rps 5000 --max-replicas 5: answers at once from the throughput lower bound', () => {
      // Was: > 100 s with no output (simulating 300,000 arrivals on 5 replicas).
      const started = Date.now();
      const r = run(['--simulate', '--rps', '5000', '--input', '2000', '--output', '300', '--max-replicas', '5']);
      expect(Date.now() - started).toBeLessThan(1000);
      expect(r.status).toBe(1);
      expect(r.out).toContain('throughput lower bound 2,875 replicas');
      expect(r.out).toContain(
        'answer: none up to --max-replicas 5: the throughput lower bound is 2,875 replicas (a smaller fleet falls behind the arrivals), so nothing was simulated; raise --max-replicas to at least 2,875',
      );
      expect(r.out).not.toContain('tried:');
      const json = run(['--simulate', '--rps', '5000', '--input', '2000', '--output', '300', '--max-replicas', '5', '--json']);
      expect(json.status).toBe(1);
      expect(JSON.parse(json.out)).toMatchObject({
        simulation: { lowerBound: 2875, replicas: null, trials: [], unreachable: { reason: 'lower_bound_above_max_replicas', maxReplicas: 5 } },
      });
    }, 5000);

    it('a lower bound above the largest --max-replicas points to the throughput plan', () => {
      const r = run(['--simulate', '--rps', '1e6', '--input', '2000', '--output', '300', '--max-replicas', '10000']);
      expect(r.status).toBe(1);
      expect(r.out).toContain('the throughput lower bound is 575,000 replicas');
      expect(r.out).toContain('that is above the 10,000 --max-replicas allows: size a load this large with the throughput plan (--replica-tps)');
    });

    it('--duration is capped at a day', () => {
      const r = run(['--simulate', '--rps', '5000', '--input', '20', '--output', '3', '--duration', '100000']);
      expect(r.status).toBe(2);
      expect(r.err).toContain('--duration: expected a number > 0 and ≤ 86,400, got "100000"');
    });

    it.each([
      [['--rps', '5000', '--input', '20', '--output', '3'], '--rps 5,000 × --duration 60 s = 300,000 expected arrivals, more than the 100,000 a simulation replays: give --duration 20 or less'],
      [['--rps', '1000', '--input', '20', '--output', '300'], '--rps 1,000 × --duration 60 s × 300 mean output tokens (--output) = 18,000,000 output tokens to simulate, more than 5,000,000: give --duration 16.666 or less'],
      [['--rps', '100', '--input', '20', '--output', '300', '--output-p95', '5000'], '--rps 100 × --duration 60 s × 1,295.396 mean output tokens (--output/--output-p95) = 7,772,376 output tokens to simulate, more than 5,000,000: give --duration 38.598 or less'],
      [['--rps', '1', '--input', '20', '--output', '1e6', '--kv-tokens', '1e7', '--max-replicas', '10000'], '--output: 1,000,000 output tokens per request on average is too many to simulate 20 requests within 5,000,000 output tokens'],
    ])('bounds the work of a run, naming the flags: %j', (argv, message) => {
      const started = Date.now();
      const r = run(['--simulate', ...argv]);
      expect(Date.now() - started).toBeLessThan(1000);
      expect(r.status).toBe(2);
      expect(r.err).toContain(`weir: ${message}`);
    }, 5000);
  });

  it('maps library fields to flags', () => {
    expect(flagOfField('profile.decodeStepMs[1].batch')).toBe('--decode-ms');
    expect(flagOfField('outputTokens[2]')).toBe('--output-samples');
    expect(flagOfField('utilization')).toBe('--util');
  });
});

describe('the weir bin (spawned, as npx runs it)', () => {
  const bin = path.resolve(__dirname, '../bin/weir.mjs');

  it('prints 18 and 19 for the seed’s numbers and exits 0', () => {
    const r = spawnSync(process.execPath, [bin, 'capacity', ...seedFlags], { encoding: 'utf8', cwd: path.resolve(__dirname, '../../..') });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('= 18 replicas');
    expect(r.stdout).toContain('19 replicas (18 for throughput at 70% + 1 to survive 1 failure)');
  });

  it('exits 2 on an unknown flag', () => {
    const r = spawnSync(process.execPath, [bin, 'capacity', '--nope'], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--nope: unknown flag');
  });
});
