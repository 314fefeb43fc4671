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

  it('exits 1 when no fleet meets the targets', () => {
    const c = capture();
    const argv = ['capacity', '--simulate', '--rps', '10', '--input', '500', '--output', '100', '--duration', '5', '--tpot-p95-ms', '5', '--max-replicas', '3'];
    expect(runCli(argv, c.io)).toBe(1);
    expect(c.out.join('')).toContain('answer: none up to --max-replicas 3');
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
