/**
 * Where an idle all-in-one's memory goes, and how long it takes to start (issue 13, items 6–7).
 *
 *   node --import tsx tools/bench/idle-memory.ts [--runner bundle|tsx|both] [--start fresh|reopen|both]
 *        [--idle-ms 10000] [--repeat 1] [--node-args "--flag …"] [--no-pin] [--out FILE]
 *
 * For each runner (`bundle`: node on dist/apps/all-in-one/main.cjs, as `npm start` runs it;
 * `tsx`: node --import tsx on the TypeScript sources, as it ran before) and each start
 * (`fresh`: an empty data directory, so PGlite runs initdb; `reopen`: a data directory a
 * previous start created), it starts the all-in-one with the speed probe's configuration (one
 * OpenAI-compatible revision on a mock upstream, no local engine; auth, budget, tokens/min on),
 * waits `--idle-ms` without traffic and records:
 *
 * - the time from spawn to the first `/readyz` 200;
 * - RSS (VmRSS) before the inspector is attached, and where it is (/proc/<pid>/smaps): PGlite's
 *   WASM memory, glibc's arenas (main and threads'), JIT/WASM code, other anonymous memory
 *   (V8's heap pages, stacks), the node binary, other files, and any native add-on mapped from
 *   node_modules (node-llama-cpp must not be there);
 * - `process.memoryUsage()` (V8 heap used/total, external, array buffers) through the inspector;
 * - the same after a full GC (HeapProfiler.collectGarbage).
 *
 * The all-in-one is pinned to CPU 1 (taskset) unless `--no-pin`. Results: a markdown table on
 * stdout and, with `--out FILE.json`, the raw figures (and FILE.md).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startAllInOneProcess, type Runner } from './all-in-one-process';
import { connectInspector } from './inspector';
import { startMockUpstream } from './mock-upstream';
import { memoryBreakdown, type MemoryBreakdown, rssMiB, tasksetPath } from './proc';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const both = <T extends string>(v: string | undefined, all: T[], dflt: T[]): T[] => (v === undefined ? dflt : v === 'both' ? all : (v.split(',') as T[]));
const RUNNERS = both<Runner>(value('--runner'), ['tsx', 'bundle'], ['bundle']);
type Start = 'fresh' | 'reopen';
const STARTS = both<Start>(value('--start'), ['fresh', 'reopen'], ['fresh', 'reopen']);
const IDLE_MS = Number(value('--idle-ms') ?? 10_000);
const REPEAT = Number(value('--repeat') ?? 1);
const NODE_ARGS = (value('--node-args') ?? '').split(' ').filter(Boolean);
const PIN = !argv.includes('--no-pin') && tasksetPath() !== undefined;
const OUT = value('--out');

interface MemoryUsage {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
}

interface Sample {
  runner: Runner;
  start: Start;
  run: number;
  nodeArgs: string[];
  startupMs: number;
  /** RSS at the end of the idle wait, before the inspector was attached (MiB). */
  rssIdleMiB: number;
  idle: MemoryBreakdown;
  idleUsage: MemoryUsage;
  afterGc: MemoryBreakdown;
  afterGcUsage: MemoryUsage;
}

const mib = (b: number) => b / 2 ** 20;
const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : '—');

async function measure(runner: Runner, start: Start, run: number, mockUrl: string): Promise<Sample> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'weir-idle-memory-'));
  try {
    if (start === 'reopen') {
      // A first start creates the database (initdb, migrations); the measured one reopens it.
      const first = await startAllInOneProcess({ runner, dataDir, mockUrl, cpu: PIN ? 1 : undefined });
      await first.stop();
    }
    const p = await startAllInOneProcess({ runner, dataDir, mockUrl, inspect: true, nodeArgs: NODE_ARGS, cpu: PIN ? 1 : undefined });
    try {
      await new Promise((r) => setTimeout(r, IDLE_MS));
      const rssIdleMiB = rssMiB(p.pid);
      const idle = memoryBreakdown(p.pid);
      if (!p.inspectorUrl) throw new Error(`no inspector URL in the all-in-one's output:\n${p.lines.slice(-10).join('\n')}`);
      const session = await connectInspector(p.inspectorUrl);
      try {
        const usage = () => session.evaluate<MemoryUsage>('process.memoryUsage()');
        const idleUsage = await usage();
        await session.collectGarbage();
        await new Promise((r) => setTimeout(r, 1_000));
        const afterGc = memoryBreakdown(p.pid);
        const afterGcUsage = await usage();
        return { runner, start, run, nodeArgs: NODE_ARGS, startupMs: p.startupMs, rssIdleMiB, idle, idleUsage, afterGc, afterGcUsage };
      } finally {
        session.close();
      }
    } finally {
      await p.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function table(samples: Sample[]): string {
  const lines = [
    `Idle all-in-one, speed probe's configuration (one OpenAI-compatible revision, no local engine), ${IDLE_MS / 1000} s without traffic${PIN ? ', pinned to CPU 1' : ''}${NODE_ARGS.length ? `, node ${NODE_ARGS.join(' ')}` : ''}; node ${process.version}. MiB. "after GC": after a full GC through the inspector. WASM = PGlite's WebAssembly memory (resident part); arenas = glibc's thread arenas (native allocations of V8's compiler threads, e.g. for PGlite's WASM code); main = glibc's main arena; V8 heap = process.memoryUsage() heapUsed / heapTotal.`,
    '',
    '| runner | start | ready s | RSS idle | RSS after GC | V8 heap idle (used / total) | V8 heap after GC | external / arrayBuffers | WASM | arenas | main | code | other anon | node binary | other files | node_modules mapped |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const s of samples) {
    const a = s.afterGc;
    lines.push(
      `| ${s.runner} | ${s.start} | ${(s.startupMs / 1000).toFixed(2)} | **${f0(s.rssIdleMiB)}** | ${f0(a.rssMiB)} | ${f0(mib(s.idleUsage.heapUsed))} / ${f0(mib(s.idleUsage.heapTotal))} | ${f0(mib(s.afterGcUsage.heapUsed))} / ${f0(mib(s.afterGcUsage.heapTotal))} | ${f0(mib(s.afterGcUsage.external))} / ${f0(mib(s.afterGcUsage.arrayBuffers))} | ${f0(a.wasmMemoryMiB)} | ${f0(a.mallocArenasMiB)} | ${f0(a.mainArenaMiB)} | ${f0(a.codeMiB)} | ${f0(a.otherAnonMiB)} | ${f0(a.nodeBinaryMiB)} | ${f0(a.otherFileMiB)} | ${a.nodeModulesMapped.join(', ') || 'none'} |`,
    );
  }
  return lines.join('\n') + '\n';
}

async function main(): Promise<void> {
  const mock = await startMockUpstream({ tokens: 50 });
  const samples: Sample[] = [];
  try {
    for (let run = 1; run <= REPEAT; run++) {
      for (const runner of RUNNERS) {
        for (const start of STARTS) {
          const s = await measure(runner, start, run, mock.url);
          samples.push(s);
          process.stdout.write(`${runner} ${start} #${run}: ready in ${(s.startupMs / 1000).toFixed(2)} s, RSS idle ${f0(s.rssIdleMiB)} MiB, after GC ${f0(s.afterGc.rssMiB)} MiB\n`);
        }
      }
    }
  } finally {
    await mock.close();
  }
  const md = table(samples);
  process.stdout.write(`\n${md}`);
  if (OUT) {
    writeFileSync(OUT, JSON.stringify({ meta: { date: new Date().toISOString(), node: process.version, idleMs: IDLE_MS, pinned: PIN, nodeArgs: NODE_ARGS }, samples }, null, 2) + '\n');
    writeFileSync(OUT.replace(/\.json$/, '.md'), md);
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`idle-memory failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
