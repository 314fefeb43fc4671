/**
 * The semantic response cache on the running all-in-one with the real tiny model (stories260K
 * for generation, the same GGUF as an embedding revision): the policy is turned on through the
 * admin API (a threshold under the floor and a generation revision are refused with 400 naming
 * the field); a prompt repeated with other spacing is an exact miss and a semantic hit that never
 * reaches the engine, recorded as `cache_hit: semantic`, and so is one with other punctuation; the negated prompt — 0.9988 cosine on
 * this model — is a guarded miss; the semantic metrics count both.
 */
import { tinyModelPath } from '@weir/testing';
import OpenAI from 'openai';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_semcach1_' + 'S'.repeat(43);

const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 100000, output_per_mtok: 200000 }
  - id: stories260k-embed@1
    model: stories260k-embed
    kind: embedding
    embedding: { dimensions: 64 }
    engine: { kind: llamacpp, threads: 1, sequences: 1, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 1
    default_output_tokens: 1
    pricing: { input_per_mtok: 1000, output_per_mtok: 0 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
  - name: tiny-embed
    revision: stories260k-embed@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 16 }
    cache:
      exact: { enabled: true, ttl_ms: 600000 }
      hit_price_fraction: 0.5
`;

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`condition not met in time: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('the semantic response cache on the real tiny model (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform;
  let client: OpenAI;

  beforeAll(async () => {
    running = await startTestPlatform('semcache', CONFIG, DEMO_KEY);
    platform = running.platform;
    client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${platform.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await running?.stop();
  });

  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${platform.url}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${platform.adminToken as string}`, 'content-type': 'application/json' },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  const engineTokens = async () => {
    const text = await (await fetch(`${platform.opsUrl}/metrics`)).text();
    return [...text.matchAll(/^weir_engine_output_tokens_total\{[^}]*revision="stories260k@1"[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
  };
  const ask = (content: string) => client.chat.completions.create({ model: 'tiny-stories', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 16 }).withResponse();

  it('refuses a policy under the floor or on a generation revision with 400 naming the field', async () => {
    const low = await admin('PATCH', '/tenants/demo/policy', { cache: { exact: { enabled: true }, semantic: { enabled: true, threshold: 0.9, embedding_revision: 'stories260k-embed@1' } } });
    expect(low.status).toBe(400);
    const lowBody = (await low.json()) as { error: { message: string; problems: { path: string; message: string }[] } };
    expect(lowBody.error.problems).toEqual([expect.objectContaining({ path: 'tenants[0].cache.semantic.threshold', message: expect.stringMatching(/below the floor of 0\.95/) })]);
    const generation = await admin('PATCH', '/tenants/demo/policy', { cache: { exact: { enabled: true }, semantic: { enabled: true, embedding_revision: 'stories260k@1' } } });
    expect(generation.status).toBe(400);
    expect(((await generation.json()) as { error: { problems: { path: string }[] } }).error.problems).toEqual([expect.objectContaining({ path: 'tenants[0].cache.semantic.embedding_revision' })]);
  });

  it('a prompt repeated with other spacing is a semantic hit; the negated prompt is a guarded miss', async () => {
    const version = platform.configState().version as number;
    const set = await admin('PATCH', '/tenants/demo/policy', {
      cache: { exact: { enabled: true, ttl_ms: 600_000 }, semantic: { enabled: true, threshold: 0.97, embedding_revision: 'stories260k-embed@1', ttl_ms: 3_600_000 }, hit_price_fraction: 0.5 },
    });
    expect(set.status).toBe(200);
    await until(async () => platform.configState().version as number, (v) => v > version);

    const miss = await ask('Is the bridge open today?');
    expect(miss.response.headers.get('x-weir-cache')).toBe('miss');
    const text = miss.data.choices[0].message.content;
    // The store runs after the answer (embedding the prompt again is not needed: the lookup's vector is kept).
    // Each try is spelt differently (so a try that raced the store cannot make the next an exact hit).
    let attempt = 0;
    const hit = await until(
      () => ask(`Is the  bridge open   today?${' '.repeat(++attempt)}`),
      (r) => r.response.headers.get('x-weir-cache') === 'hit',
    );
    expect(hit.response.headers.get('x-weir-cache-tier')).toBe('semantic');
    expect(hit.data.choices[0].message.content).toBe(text);
    expect(hit.data.usage).toEqual(miss.data.usage);
    // Once stored, another spacing of it never reaches the engine.
    const settled = await engineTokens();
    expect(settled).toBeGreaterThan(0);
    const again = await ask('Is the bridge\nopen today?');
    expect(again.response.headers.get('x-weir-cache-tier')).toBe('semantic');
    // Other punctuation is another prompt for the model (cosine 0.9977 on this one): a semantic hit too.
    const punctuated = await ask('Is the bridge open today??');
    expect(punctuated.response.headers.get('x-weir-cache')).toBe('hit');
    expect(punctuated.response.headers.get('x-weir-cache-tier')).toBe('semantic');
    expect(punctuated.data.choices[0].message.content).toBe(text);
    expect(await engineTokens()).toBe(settled);

    const generated = await engineTokens();
    const negated = await ask('Is the bridge not open today?');
    expect(negated.response.headers.get('x-weir-cache')).toBe('miss');
    expect(await engineTokens()).toBeGreaterThan(generated);

    // Usage rows reach the ledger through the settlement journal's applier, a moment after the answers.
    const usage = await until(
      async () => (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as { cache_hits: number },
      (u) => u.cache_hits >= 1,
    );
    expect(usage.cache_hits).toBeGreaterThanOrEqual(1);

    const metrics = await (await fetch(`${platform.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/weir_cache_semantic_lookups_total\{(?=[^}]*outcome="hit")[^}]*\} [1-9]/);
    expect(metrics).toMatch(/weir_cache_semantic_lookups_total\{(?=[^}]*outcome="guarded_miss")(?=[^}]*reason="negation")[^}]*\} 1/);
    expect(metrics).toMatch(/weir_cache_semantic_embedding_duration_count\{[^}]*embedding_revision="stories260k-embed@1"[^}]*\} [1-9]/);
    expect(metrics).toMatch(/weir_cache_lookups_total\{(?=[^}]*tier="semantic")(?=[^}]*result="hit")[^}]*\} [1-9]/);
  });

  it('turning the semantic tier off stops embedding: a near-duplicate is an exact miss', async () => {
    const version = platform.configState().version as number;
    expect((await admin('PATCH', '/tenants/demo/policy', { cache: { exact: { enabled: true, ttl_ms: 600_000 } } })).status).toBe(200);
    await until(async () => platform.configState().version as number, (v) => v > version);
    const before = await (await fetch(`${platform.opsUrl}/metrics`)).text();
    const count = (t: string) => [...t.matchAll(/^weir_cache_semantic_lookups_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
    const r = await ask('Is the bridge open today ?');
    expect(r.response.headers.get('x-weir-cache')).toBe('miss');
    expect(count(await (await fetch(`${platform.opsUrl}/metrics`)).text())).toBe(count(before));
  });
});

describe('the semantic response cache in the database (semantic_store: postgres, on the embedded PGlite)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform;
  let client: OpenAI;

  beforeAll(async () => {
    const config = CONFIG.replace(
      '      hit_price_fraction: 0.5\n',
      '      hit_price_fraction: 0.5\n      semantic: { enabled: true, embedding_revision: stories260k-embed@1 }\ndefaults:\n  cache: { semantic_store: postgres }\n',
    );
    running = await startTestPlatform('semcache-pg', config, DEMO_KEY);
    platform = running.platform;
    client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${platform.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await running?.stop();
  });

  it('a policy from the file: a respaced prompt is a semantic hit served from the database, recorded as one', async () => {
    const ask = (content: string) => client.chat.completions.create({ model: 'tiny-stories', messages: [{ role: 'user', content }], temperature: 0, max_tokens: 12 }).withResponse();
    const miss = await ask('Where does the little fox live?');
    expect(miss.response.headers.get('x-weir-cache')).toBe('miss');
    let attempt = 0;
    const hit = await until(
      () => ask(`Where  does the little fox live?${' '.repeat(++attempt)}`),
      (r) => r.response.headers.get('x-weir-cache') === 'hit',
    );
    expect(hit.response.headers.get('x-weir-cache-tier')).toBe('semantic');
    expect(hit.data.choices[0].message.content).toBe(miss.data.choices[0].message.content);
    const usage = await until(
      async () => (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as { cache_hits: number; requests: number },
      (u) => u.cache_hits === 1,
    );
    expect(usage.requests).toBe(attempt + 1);
  });
});
