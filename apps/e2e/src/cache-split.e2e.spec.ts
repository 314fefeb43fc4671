/**
 * The exact response cache on the split topology (issue 15 item 1; docs/caching.md), with the
 * real tiny model: two gateways share the Postgres tier (`defaults.cache.exact_store:
 * postgres`), so a miss answered through gateway 0 is a hit on gateway 1 — admitted by one
 * `Reserve` at an admission instance (no scheduler slot), never reaching the relay or an engine,
 * its usage row (`cache_hit`) carried by JetStream to the ledger service and Postgres, where
 * `/v1/usage` counts it at the tenant's cache price — and the gateway's metrics count the hit.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { STORIES260K_SHA256, STORIES260K_URL } from '@weir/config';
import { Pool } from 'pg';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { createTemporaryPostgresDatabase } from '@weir/store-pg';
import { tinyModelPath } from '@weir/testing';
import { sumEngineOutputTokens } from './support/e2e-suite';

jest.setTimeout(180_000);

const DEMO_KEY = 'wk_cachesp1_' + 'S'.repeat(43);

/** One revision (one engine replica), the demo tenant's exact cache on, shared in Postgres. */
const CONFIG = `
revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_sha256: ${STORIES260K_SHA256}, model_url: '${STORIES260K_URL}' }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 100000, output_per_mtok: 200000 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 16 }
    cache:
      exact: { enabled: true, ttl_ms: 600000 }
      hit_price_fraction: 0.5
defaults:
  cancel_grace_ms: 300
  cache: { exact_store: postgres }
`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`condition not met in time: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Σ of a counter's samples whose labels include every one of `labels`, in a Prometheus scrape. */
function sumCounter(metricsText: string, name: string, labels: Record<string, string>): number {
  let total = 0;
  for (const line of metricsText.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) total += Number(line.split(' ').at(-1));
  }
  return total;
}

describe('the exact response cache on the split topology (two gateways, a shared Postgres tier)', () => {
  let split: SplitTopology | undefined;
  let workDir: string;
  let pg: Awaited<ReturnType<typeof createTemporaryPostgresDatabase>>;

  beforeAll(async () => {
    pg = await createTemporaryPostgresDatabase();
    workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-cache-split-'));
    split = await startSplitTopology({
      configText: CONFIG,
      workDir,
      modelPath: tinyModelPath(),
      databaseUrl: pg.url,
      natsNamespace: `e2e-${randomBytes(4).toString('hex')}`,
      deleteNatsStreamOnStop: true,
      enginesPerRevision: 1,
      env: { WEIR_DEMO_API_KEY: DEMO_KEY },
    });
  });
  afterAll(async () => {
    try {
      if (split) expect(await split.stop()).toBe(true);
    } finally {
      rmSync(workDir, { recursive: true, force: true });
      await pg?.drop();
    }
  });

  const post = (gateway: number, body: unknown) =>
    fetch(`${split?.gateways[gateway].url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const usage = async (): Promise<Json> => (await fetch(`${split?.gateways[1].url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json();
  /** Output tokens the engine replica produced so far (its own metrics). */
  const engineOutputTokens = async () => {
    const engine = split?.engines[0];
    const text = await (await split?.serviceFetch(`${engine?.url}/metrics`))?.text();
    return sumEngineOutputTokens(text ?? '', 'stories260k@1');
  };

  it('a miss on one gateway is a hit on the other: the same answer, no engine work, one cache_hit row at the cache price, counted in the metrics', async () => {
    const ask = { model: 'tiny-stories', messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: 24 };
    const first = await post(0, ask);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    const miss: Json = await first.json();
    expect(miss.choices[0].message.content.length).toBeGreaterThan(0);
    const before = await until(usage, (u) => u.requests === 1);
    expect(before.cache_hits).toBe(0);
    const engineBefore = await engineOutputTokens();

    // The store runs after the answer (a Postgres write): wait for the shared row, then ask the other gateway.
    const db = new Pool({ connectionString: pg.url, max: 1 });
    try {
      await until(async () => Number((await db.query<{ n: string }>('select count(*) as n from response_cache')).rows[0].n), (n) => n === 1);
    } finally {
      await db.end();
    }
    const hitRes = await post(1, ask);
    expect(hitRes.status).toBe(200);
    expect(hitRes.headers.get('x-weir-cache-tier')).toBe('exact');
    expect(hitRes.headers.get('x-weir-model-revision')).toBe('stories260k@1');
    const hit: Json = await hitRes.json();
    expect(hit.choices).toEqual(miss.choices);
    expect(hit.usage).toEqual(miss.usage);

    // Through JetStream to the ledger: one more request, a cache hit, billed half the miss's price.
    const after = await until(usage, (u) => u.cache_hits >= 1);
    expect(after).toMatchObject({ requests: 2, cache_hits: 1 });
    const missNano = BigInt(before.cost_nano_usd);
    expect(BigInt(after.cost_nano_usd) - missNano).toBe(BigInt(Math.round(Number(missNano) * 0.5)));
    expect(after.tokens.output - before.tokens.output).toBe(miss.usage.completion_tokens);
    // No engine produced anything for the hit.
    expect(await engineOutputTokens()).toBe(engineBefore);

    const metrics = await (await fetch(`${split?.opsUrls.get('gateway-1')}/metrics`)).text();
    expect(sumCounter(metrics, 'weir_cache_lookups_total', { tenant: 'demo', result: 'hit', tier: 'exact' })).toBe(1);
    expect(sumCounter(metrics, 'weir_cache_saved_usd_total', { tenant: 'demo' })).toBeGreaterThan(0);
  });
});
