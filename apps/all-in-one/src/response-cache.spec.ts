/**
 * The exact response cache on the running all-in-one with the real tiny model (stories260K,
 * greedy at temperature 0): through the official `openai` SDK, a repeated request is a hit that
 * never reaches the engine — the same text and usage, streamed with the same chunks — recorded
 * in the ledger as a cache hit at the tenant's cache price (`/v1/usage` counts it), and counted
 * in the cache metrics.
 */
import { tinyModelPath } from '@weir/testing';
import OpenAI from 'openai';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_cache001_' + 'C'.repeat(43);

const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
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
    limits: { max_concurrent: 16 }
    cache:
      exact: { enabled: true, ttl_ms: 600000 }
      hit_price_fraction: 0.5
`;

interface UsageBody {
  requests: number;
  cache_hits: number;
  cost_nano_usd: string;
}

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`condition not met in time: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('the exact response cache on the real tiny model (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform;
  let client: OpenAI;

  beforeAll(async () => {
    running = await startTestPlatform('cache', CONFIG, DEMO_KEY);
    platform = running.platform;
    client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${platform.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await running?.stop();
  });

  const usage = async () => (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as UsageBody;

  it('a repeat is a hit with the same answer, billed at the cache price, streamed with the same chunks', async () => {
    const ask = { model: 'tiny-stories', messages: [{ role: 'user' as const, content: 'Once upon a time' }], temperature: 0, max_tokens: 24 };
    const miss = await client.chat.completions.create(ask).withResponse();
    expect(miss.response.headers.get('x-weir-cache')).toBe('miss');
    const text = miss.data.choices[0].message.content ?? '';
    expect(text.length).toBeGreaterThan(0);
    const before = await until(usage, (u) => u.requests === 1);

    // The store runs after the answer: the repeat may race it once, so wait for a hit.
    const hit = await until(
      () => client.chat.completions.create(ask).withResponse(),
      (r) => r.response.headers.get('x-weir-cache') === 'hit',
    );
    expect(hit.response.headers.get('x-weir-cache-tier')).toBe('exact');
    expect(hit.data.choices[0].message.content).toBe(text);
    expect(hit.data.choices[0].finish_reason).toBe(miss.data.choices[0].finish_reason);
    expect(hit.data.usage).toEqual(miss.data.usage);

    const after = await until(usage, (u) => u.cache_hits === 1);
    // The admin API's usage counts it too.
    const admin = (await (await fetch(`${platform.url}/admin/v1/usage?tenant=demo&window=day`, { headers: { authorization: `Bearer ${platform.adminToken as string}` } })).json()) as { data: { cache_hits: number; requests: number }[] };
    expect(admin.data).toEqual([expect.objectContaining({ cache_hits: 1, requests: after.requests })]);
    // The hit is half the miss's price (hit_price_fraction 0.5). Requests that raced the store
    // were misses billed in full: count them out.
    const missCost = BigInt(before.cost_nano_usd);
    const extraMisses = after.requests - 2;
    expect(BigInt(after.cost_nano_usd) - missCost * BigInt(1 + extraMisses)).toBe(missCost / 2n);

    // Streamed: the miss and the hit send the same chunks (text, finish, usage chunk).
    const chunksOf = async (body: object) => {
      const { data, response } = await client.chat.completions.create({ ...ask, ...body, stream: true, stream_options: { include_usage: true } }).withResponse();
      const chunks: unknown[] = [];
      for await (const c of data) chunks.push({ choices: c.choices, usage: c.usage ?? null });
      return { chunks, cache: response.headers.get('x-weir-cache') };
    };
    const streamedMiss = await chunksOf({ max_tokens: 20 });
    expect(streamedMiss.cache).toBe('miss');
    const streamedHit = await until(() => chunksOf({ max_tokens: 20 }), (r) => r.cache === 'hit');
    expect(streamedHit.chunks).toEqual(streamedMiss.chunks);
    expect(streamedHit.chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: expect.any(Number) } });
  });

  it('a personalised request (`user`) is never served from the cache', async () => {
    const r = await client.chat.completions.create({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: 24, user: 'someone' }).withResponse();
    expect(r.response.headers.get('x-weir-cache')).toBe('bypass');
  });

  it('counts lookups and savings in the cache metrics', async () => {
    const text = await (await fetch(`${platform.opsUrl}/metrics`)).text();
    expect(text).toMatch(/weir_cache_lookups_total\{(?=[^}]*tenant="demo")(?=[^}]*tier="exact")(?=[^}]*result="hit")[^}]*\} [1-9]/);
    expect(text).toMatch(/weir_cache_lookups_total\{(?=[^}]*result="bypass")[^}]*\} 1/);
    const saved = /weir_cache_saved_usd_total\{(?=[^}]*tier="exact")[^}]*\} ([0-9.e+-]+)/.exec(text);
    expect(Number(saved?.[1])).toBeGreaterThan(0);
  });
});

describe('the exact cache in Postgres (defaults.cache.exact_store: postgres) on the all-in-one', () => {
  const config = `${CONFIG}defaults:\n  cache: { exact_store: postgres }\n`;
  const ask = { model: 'tiny-stories', messages: [{ role: 'user' as const, content: 'The little dog' }], temperature: 0, max_tokens: 16 };

  it('serves a hit from the database, after a restart too', async () => {
    const first = await startTestPlatform('cache-pg', config, DEMO_KEY, { keepDir: true });
    let second: TestPlatform | undefined;
    try {
      const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${first.platform.url}/v1`, maxRetries: 0 });
      const miss = await client.chat.completions.create(ask).withResponse();
      expect(miss.response.headers.get('x-weir-cache')).toBe('miss');
      const hit = await until(() => client.chat.completions.create(ask).withResponse(), (r) => r.response.headers.get('x-weir-cache') === 'hit');
      expect(hit.data.choices[0].message.content).toBe(miss.data.choices[0].message.content);
      await first.stop();
      // The in-process tier would be empty now: a hit can only come from the response_cache table.
      second = await startTestPlatform('cache-pg', config, DEMO_KEY, { dir: first.dir });
      const again = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${second.platform.url}/v1`, maxRetries: 0 });
      const afterRestart = await again.chat.completions.create(ask).withResponse();
      expect(afterRestart.response.headers.get('x-weir-cache')).toBe('hit');
      expect(afterRestart.data.choices[0].message.content).toBe(miss.data.choices[0].message.content);
    } finally {
      await second?.stop();
      await first.stop().catch(() => undefined);
    }
  });
});
