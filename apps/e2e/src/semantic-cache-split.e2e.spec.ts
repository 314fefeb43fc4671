/**
 * The semantic response cache on the split topology (issue 15 item 2; docs/caching.md "The split
 * topology"), as the real processes run it with the tiny model: two gateways share the Postgres
 * semantic store (`defaults.cache.semantic_store: postgres`; the exact tier stays in each
 * gateway), and embed prompts through the streaming relay on the embedding revision's llama.cpp
 * replica. A prompt answered through gateway 0 is a semantic hit for the same prompt written
 * with other spacing and case at gateway 1 (an exact miss there); a renumbered prompt is a
 * guarded miss; and the cache's own embeddings are never billed: the ledger holds one row per
 * chat request and none for an embedding.
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

jest.setTimeout(240_000);

const DEMO_KEY = 'wk_semsplt1_' + 'S'.repeat(43);

/**
 * A generation and an embedding revision of the tiny model (one replica each); the demo tenant's
 * exact and semantic tiers on. The lookup budget is generous: this machine is shared, and a slow
 * embedding would only make a miss (the spec in libs/gateway proves that case).
 */
const CONFIG = `
revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_sha256: ${STORIES260K_SHA256}, model_url: '${STORIES260K_URL}' }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 100000, output_per_mtok: 200000 }
  - id: stories260k-embed@1
    model: stories260k-embed
    kind: embedding
    embedding: { dimensions: 64 }
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_sha256: ${STORIES260K_SHA256}, model_url: '${STORIES260K_URL}' }
    context_window: 512
    max_output_tokens: 1
    default_output_tokens: 1
    pricing: { input_per_mtok: 100000, output_per_mtok: 0 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
  - name: tiny-embed
    revision: stories260k-embed@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 16 }
    cache:
      exact: { enabled: true, ttl_ms: 600000 }
      semantic: { enabled: true, embedding_revision: stories260k-embed@1, threshold: 0.97, ttl_ms: 600000 }
      hit_price_fraction: 0.5
defaults:
  cancel_grace_ms: 300
  cache: { exact_store: memory, semantic_store: postgres, semantic_lookup_timeout_ms: 10000 }
`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`condition not met in time: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.each([
  ['signed snapshots from the control plane', true],
  ['every service reading the file (tenants without internal ids: the gateway takes them from their rows)', false],
])('the semantic response cache on the split topology (two gateways, a shared Postgres store, embeddings through the relay), %s', (_mode, withControlPlane) => {
  let split: SplitTopology | undefined;
  let workDir: string;
  let pg: Awaited<ReturnType<typeof createTemporaryPostgresDatabase>>;
  let db: Pool;

  beforeAll(async () => {
    pg = await createTemporaryPostgresDatabase();
    db = new Pool({ connectionString: pg.url, max: 1 });
    workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-semantic-split-'));
    split = await startSplitTopology({
      configText: CONFIG,
      workDir,
      modelPath: tinyModelPath(),
      databaseUrl: pg.url,
      natsNamespace: `e2e-${randomBytes(4).toString('hex')}`,
      deleteNatsStreamOnStop: true,
      enginesPerRevision: 1,
      env: { WEIR_DEMO_API_KEY: DEMO_KEY },
      // `npm run split` runs the control plane by default (its snapshots carry the tenants' internal
      // ids); SPLIT_CONTROL_PLANE=0 has every service read the file.
      ...(withControlPlane ? { controlPlane: { adminToken: `wa_semsplt1_${'A'.repeat(43)}`, heartbeatMs: 1_000 } } : {}),
    });
  });
  afterAll(async () => {
    try {
      if (split) expect(await split.stop()).toBe(true);
    } finally {
      await db?.end();
      rmSync(workDir, { recursive: true, force: true });
      await pg?.drop();
    }
  });

  const post = (gateway: number, content: string) =>
    fetch(`${split?.gateways[gateway].url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 16 }),
    });
  const count = async (sql: string) => Number((await db.query<{ n: string }>(sql)).rows[0].n);

  it('a prompt answered at one gateway is a semantic hit at the other; a renumbered one is a guarded miss; the embeddings bill nothing', async () => {
    const first = await post(0, 'Once upon a time there were 3 little cats');
    expect(first.status).toBe(200);
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    const miss: Json = await first.json();
    // The store runs after the answer: wait for the shared row.
    await until(() => count('select count(*) as n from semantic_cache_entries'), (n) => n === 1);

    // Gateway 1: its own exact tier is empty and the text differs; the shared semantic store answers.
    const second = await post(1, '  once upon a time   there were 3 little cats ');
    expect(second.status).toBe(200);
    expect(second.headers.get('x-weir-cache')).toBe('hit');
    expect(second.headers.get('x-weir-cache-tier')).toBe('semantic');
    const hit: Json = await second.json();
    expect(hit.choices[0].message.content).toBe(miss.choices[0].message.content);

    // A different number: the tiny model's vectors are near-identical, the guard refuses the match.
    const third = await post(1, 'Once upon a time there were 4 little cats');
    expect(third.status).toBe(200);
    expect(third.headers.get('x-weir-cache')).toBe('miss');
    await third.json();

    // Through JetStream to the ledger: three chat rows (one a semantic hit), no embeddings row.
    await until(() => count(`select count(*) as n from usage_ledger`), (n) => n >= 3);
    await new Promise((r) => setTimeout(r, 500));
    const rows = (await db.query<{ route: string; cache_hit: string | null }>(`select route, cache_hit from usage_ledger order by finished_at`)).rows;
    expect(rows.map((r) => [r.route, r.cache_hit])).toEqual([
      ['chat.completions', null],
      ['chat.completions', 'semantic'],
      ['chat.completions', null],
    ]);
    expect(await count(`select count(*) as n from usage_ledger where route = 'embeddings'`)).toBe(0);
  });
});
