/**
 * Smoke test of the load benchmark (`npm run bench:load`, tools/bench/load-run.ts) so it does
 * not rot: the harness runs end to end with a tiny load (`--smoke`: two engine-sim replicas,
 * a few seconds per run, one replica SIGKILLed in the second run), once per topology (`--topology
 * split`, then `all-in-one`; ≈ 30 s and 20 s), and writes results that hold together. It checks
 * the harness, not Weir's speed: no latency is asserted (speed belongs in the benchmark's own
 * results).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT } from '@weir/launcher';

jest.setTimeout(300_000);

const TOPOLOGIES = ['split', 'all-in-one'] as const;
/** Weir's processes in each topology, as the results name them. */
const WEIR_PROCESSES = { split: ['gateway-0', 'admission', 'router', 'scheduler', 'relay', 'ledger'], 'all-in-one': ['all-in-one'] } as const;

interface Window {
  name: string;
  streams: Array<{ stream: string; sent: number; ok: number; errors: Record<string, number>; ttftMs: { n: number }; tpotMs: { n: number }; queueMs: { n: number } }>;
}
interface Results {
  meta: { smoke: boolean; topology: string; ledgerRowsFound: number; ledgerRowsWanted: number; capacity: { rps: number }; offered: { total: number } };
  runs: Array<{
    name: string;
    killed?: string;
    windows: Window[];
    queueSamples: unknown[];
    cpuSeconds: Record<string, number>;
    replicaOutputTokens: Record<string, number>;
    clientCompletionTokens: number;
    recordFields: string[];
    records: unknown[][];
  }>;
}

describe.each(TOPOLOGIES)('load benchmark harness (--smoke --topology %s)', (topology) => {
  let dir: string;
  let results: Results;
  let output: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'weir-load-smoke-'));
    const out = path.join(dir, 'load.json');
    const run = spawnSync(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'tools/bench/load-run.ts'), '--smoke', '--topology', topology, '--out', out], {
      cwd: REPO_ROOT,
      env: { ...process.env, NODE_OPTIONS: '', TSX_TSCONFIG_PATH: path.join(REPO_ROOT, 'tsconfig.json') },
      encoding: 'utf8',
      timeout: 280_000,
    });
    output = `${run.stdout}\n${run.stderr}`;
    if (run.status !== 0) throw new Error(`bench:load --smoke --topology ${topology} exited ${run.status}:\n${output.slice(-4000)}`);
    results = JSON.parse(readFileSync(out, 'utf8')) as Results;
    expect(readFileSync(out.replace(/\.json$/, '.md'), 'utf8')).toMatch(new RegExp(`^## Load benchmark — \\d{4}-\\d{2}-\\d{2}, ${topology} topology \\(smoke\\)$`, 'm'));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('runs the steady and the brownout run and serves every stream while the fleet is whole', () => {
    expect(results.meta.smoke).toBe(true);
    expect(results.meta.topology).toBe(topology);
    expect(results.runs.map((r) => r.name)).toEqual(['steady', 'brownout']);
    expect(results.meta.capacity.rps).toBeGreaterThan(0);
    const steady = results.runs[0].windows[0];
    for (const name of ['quiet', 'noisy']) {
      const s = steady.streams.find((x) => x.stream === name);
      expect({ name, sent: (s?.sent ?? 0) > 0, servedAll: s?.ok === s?.sent, errors: s?.errors }).toEqual({ name, sent: true, servedAll: true, errors: {} });
      // Every completed request was timed on the client and found in the usage ledger.
      expect(s?.ttftMs.n).toBe(s?.ok);
      expect(s?.tpotMs.n).toBe(s?.ok);
      expect(s?.queueMs.n).toBe(s?.ok);
    }
  });

  it('kills one replica mid-run and the survivor keeps serving', () => {
    const brownout = results.runs[1];
    expect(brownout.killed).toBe('engine-sim:0');
    expect(brownout.windows.map((w) => w.name)).toEqual(['before the kill', 'after the kill']);
    const after = brownout.windows[1].streams;
    expect(after.reduce((n, s) => n + s.ok, 0)).toBeGreaterThan(0);
    expect(output).toContain('SIGKILL engine-sim:0');
  });

  it('keeps one raw record per request and finds every completed one in the ledger', () => {
    const fields = results.runs[0].recordFields;
    expect(fields.slice(0, 5)).toEqual(['stream', 'sentMs', 'scheduledMs', 'status', 'outcome']);
    for (const run of results.runs) {
      const sent = run.windows.reduce((n, w) => n + w.streams.reduce((m, s) => m + s.sent, 0), 0);
      expect(run.records.length).toBeGreaterThanOrEqual(sent);
    }
    expect(results.meta.ledgerRowsFound).toBe(results.meta.ledgerRowsWanted);
  });

  it("scrapes the scheduler's metrics and counts CPU per process", () => {
    for (const run of results.runs) {
      expect(run.queueSamples.length).toBeGreaterThan(0);
      expect(Object.keys(run.cpuSeconds).sort()).toEqual([...WEIR_PROCESSES[topology], 'engine-sim:0', 'engine-sim:1', 'client'].sort());
      expect(WEIR_PROCESSES[topology].reduce((n, p) => n + run.cpuSeconds[p], 0)).toBeGreaterThan(0);
    }
  });

  // Both topologies serve the revision through its `replicas` (the engine-sim processes).
  it('serves the runs from the engine-sim replicas', () => {
    const steady = results.runs[0];
    expect(steady.clientCompletionTokens).toBeGreaterThan(0);
    // Every completed stream's tokens came from a replica (a counter scraped at the end may lag a little).
    expect(Object.values(steady.replicaOutputTokens).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(Math.floor(steady.clientCompletionTokens * 0.9));
  });
});
