/**
 * What an exact-cache hit costs on the split topology (issue 15, docs/caching.md), end to end
 * at the client: the split as `startSplitTopology` runs it (mutual TLS, one gateway, one
 * admission instance, the tiny llama.cpp model on one engine replica), on a private Postgres
 * database and NATS namespace. Sequential requests (concurrency 1) of two kinds, interleaved:
 *
 * - `hit`: the demo tenant's cache is on (in-process exact tier) and the request is stored: one
 *   `Reserve` at admission, the answer replayed by the gateway, the usage row to JetStream;
 * - `live (no-cache)`: the same request with `Cache-Control: no-cache` (not read from the
 *   cache): `Admit`, the scheduler, the relay and the engine, as any live request.
 *
 *   node --import tsx tools/bench/split-cache-hit.ts [--requests 200] [--max-tokens 16]
 *
 * Needs Postgres (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres: a
 * temporary database is created and dropped), NATS on 127.0.0.1:4222 and WEIR_MODEL_PATH (or a
 * network) for the tiny model. Prints p50 / p90 / p99 latency (ms) of each kind.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { STORIES260K_SHA256, STORIES260K_URL } from '@weir/config';
import { startSplitTopology } from '@weir/launcher';
import { createTemporaryPostgresDatabase } from '@weir/store-pg';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const REQUESTS = Number(value('--requests') ?? 200);
const MAX_TOKENS = Number(value('--max-tokens') ?? 16);

const CACHED_KEY = 'wk_benchca1_' + 'B'.repeat(43);
const CONFIG = `
revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 4, model_sha256: ${STORIES260K_SHA256}, model_url: '${STORIES260K_URL}' }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 64 }
    cache:
      exact: { enabled: true, ttl_ms: 3600000 }
defaults:
  cancel_grace_ms: 300
`;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function main() {
  const pg = await createTemporaryPostgresDatabase();
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-bench-split-cache-'));
  const split = await startSplitTopology({
    configText: CONFIG,
    workDir,
    ...(process.env.WEIR_MODEL_PATH ? { modelPath: process.env.WEIR_MODEL_PATH } : {}),
    databaseUrl: pg.url,
    natsNamespace: `bench-${randomBytes(4).toString('hex')}`,
    deleteNatsStreamOnStop: true,
    gateways: 1,
    admissionInstances: 1,
    enginesPerRevision: 1,
    env: { WEIR_DEMO_API_KEY: CACHED_KEY, LOG_LEVEL: 'warn' },
  });
  try {
    const url = `${split.gateways[0].url}/v1/chat/completions`;
    const body = JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: MAX_TOKENS });
    const send = async (extra: Record<string, string>) => {
      const started = performance.now();
      const res = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${CACHED_KEY}`, 'content-type': 'application/json', ...extra }, body });
      await res.text();
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      return { ms: performance.now() - started, cache: res.headers.get('x-weir-cache') };
    };
    // Store the answer, then warm every path up.
    for (let i = 0; i < 50 && (await send({})).cache !== 'hit'; i++) await new Promise((r) => setTimeout(r, 50));
    for (let i = 0; i < 20; i++) {
      await send({});
      await send({ 'cache-control': 'no-cache' });
    }
    const kinds: Record<'hit' | 'live (no-cache)', number[]> = { hit: [], 'live (no-cache)': [] };
    for (let i = 0; i < REQUESTS; i++) {
      const hit = await send({});
      if (hit.cache !== 'hit') throw new Error(`expected a hit, got ${hit.cache}`);
      kinds.hit.push(hit.ms);
      kinds['live (no-cache)'].push((await send({ 'cache-control': 'no-cache' })).ms);
    }
    console.log(`split topology (mutual TLS, 1 gateway, 1 admission, tiny model, max_tokens ${MAX_TOKENS}), ${REQUESTS} sequential requests of each kind, interleaved`);
    console.log('kind              p50 ms   p90 ms   p99 ms');
    for (const [kind, samples] of Object.entries(kinds)) {
      const sorted = [...samples].sort((a, b) => a - b);
      console.log(`${kind.padEnd(16)} ${percentile(sorted, 50).toFixed(2).padStart(7)}  ${percentile(sorted, 90).toFixed(2).padStart(7)}  ${percentile(sorted, 99).toFixed(2).padStart(7)}`);
    }
  } finally {
    await split.stop();
    rmSync(workDir, { recursive: true, force: true });
    await pg.drop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
