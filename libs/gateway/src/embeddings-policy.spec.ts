/**
 * `/v1/embeddings` and the tenant's content policies, through the running gateway and the
 * scripted engine: a batch's KV need is its largest item (the items are embedded one at a time),
 * not their sum; token-id inputs are refused for a tenant whose policy reads its input
 * (`redact_upstream`, input moderation); the content log holds `[N vectors of D dimensions]`,
 * never the vectors.
 */
import { Writable } from 'node:stream';
import { createInMemoryAdmission } from '@weir/admission';
import type { PlatformConfig, RevisionSpec, TenantModeration, TenantSpec } from '@weir/core';
import { compileModerationPolicies } from '@weir/moderation';
import { createScriptedEngine, SCRIPTED_INPUT_TOKENS } from '@weir/testing';
import { createLogger } from '@weir/telemetry';
import { createContentPolicies } from './content-policy';
import { embeddingOutputSummary } from './content-log';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const EMBED: RevisionSpec = {
  ...fakeRevision({ inputPerMTok: 2, outputPerMTok: 1_000_000, cachedInputPerMTok: 2 }),
  id: 'embed@1',
  kind: 'embedding',
  contextWindow: 512,
  embedding: { dimensions: 4, variableDimensions: false },
};

function config(tenantT: Partial<TenantSpec> = {}): PlatformConfig {
  const base = twoTenantConfig();
  return {
    ...base,
    revisions: [...base.revisions, EMBED],
    aliases: [...base.aliases, { name: 'emb', targets: [{ revision: 'embed@1', weight: 1 }] }],
    tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, ...tenantT } : t)),
    defaults: { ...base.defaults, maxBodyBytes: 256 * 1024 },
  };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies are read loosely
const json = async (res: Response): Promise<any> => res.json();

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe('the KV need of an embedding batch', () => {
  it('is its largest item: a batch whose total passes one replica’s KV is embedded', async () => {
    const c = config();
    const engine = createScriptedEngine();
    // 64 KV tokens per replica; 20 items of 7 tokens = 140 in all, 7 at a time.
    gw = await startTestGateway({ config: c, engine, admission: createInMemoryAdmission({ tenants: c.tenants }), kvTokens: 64 });
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: Array.from({ length: 20 }, () => 'hi') });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.data).toHaveLength(20);
    expect(body.usage.prompt_tokens).toBe(20 * SCRIPTED_INPUT_TOKENS);
  });

  it('one item larger than every replica’s KV is refused, telling the client to shorten the input (there is no output limit)', async () => {
    const c = config();
    const engine = createScriptedEngine();
    gw = await startTestGateway({ config: c, engine, admission: createInMemoryAdmission({ tenants: c.tenants }), kvTokens: 64 });
    // A token array counts its ids: 70 > 64.
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: [Array.from({ length: 70 }, (_, i) => i + 1), [1, 2]] });
    expect(res.status).toBe(503);
    const body = await json(res);
    expect(body.error.message).toContain('needs 70 KV tokens');
    expect(body.error.message).toContain('shorten the input');
    expect(body.error.message).not.toContain('output limit');
    expect(engine.requests).toHaveLength(0);
  });
});

describe('token-id inputs and a policy that reads the input', () => {
  const ids = { model: 'emb', input: [[5, 6, 7]] };
  const start = async (tenantT: Partial<TenantSpec>) => {
    const c = config(tenantT);
    const engine = createScriptedEngine();
    gw = await startTestGateway({
      config: c,
      engine,
      admission: createInMemoryAdmission({ tenants: c.tenants }),
      contentPolicies: createContentPolicies(c),
      moderation: compileModerationPolicies(c),
    });
    return { gw, engine };
  };

  it('redact_upstream: token ids are refused with a 400 that says to send text; text is embedded (redacted)', async () => {
    const { gw, engine } = await start({ redactionProfile: 'default', redactUpstream: true });
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: [[5, 6, 7], [8, 9]] });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.error).toMatchObject({ code: 'invalid_request', param: 'input[0]' });
    expect(body.error.message).toContain("send text: this tenant's policy redacts input");
    expect(engine.requests).toHaveLength(0);
    expect(gw.records).toHaveLength(0);
    const text = await gw.post('/v1/embeddings', { model: 'emb', input: 'mail a@example.com' });
    expect(text.status).toBe(200);
    expect(engine.requests[0]).toMatchObject({ input: { kind: 'embedding', items: ['mail [REDACTED:EMAIL]'] } });
  });

  it('input moderation: token ids are refused with a 400', async () => {
    const moderation: TenantModeration = { input: { engine: 'rules', fail: 'closed', timeoutMs: 2_000 }, rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }] } };
    const { gw, engine } = await start({ moderation });
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: [5, 6, 7] });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body.error).toMatchObject({ code: 'invalid_request', param: 'input' });
    expect(body.error.message).toContain("send text: this tenant's policy moderates input");
    expect(engine.requests).toHaveLength(0);
  });

  it('a tenant whose policy reads nothing may send token ids (the other tenant of the same gateway too)', async () => {
    const { gw, engine } = await start({ redactionProfile: 'default', redactUpstream: true });
    const res = await gw.post('/v1/embeddings', ids, {}, gw.otherKey.plaintext);
    expect(res.status).toBe(200);
    expect(engine.requests[0]).toMatchObject({ input: { kind: 'embedding', items: [[5, 6, 7]] } });
  });
});

describe('the content log of an embedding', () => {
  it('holds the redacted input and `[N vectors of D dimensions]`, never the vectors', async () => {
    let logged = '';
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        logged += chunk.toString('utf8');
        done();
      },
    });
    const c = config({ contentLogging: true, redactionProfile: 'default' });
    const engine = createScriptedEngine();
    gw = await startTestGateway({
      config: c,
      engine,
      admission: createInMemoryAdmission({ tenants: c.tenants }),
      contentPolicies: createContentPolicies(c),
      logger: createLogger({ name: 'gateway', level: 'debug', destination }),
    });
    const res = await gw.post('/v1/embeddings', { model: 'emb', input: ['mail x.y@example.com', 'two'], encoding_format: 'base64' });
    expect(res.status).toBe(200);
    const vectors: string[] = (await json(res)).data.map((d: { embedding: string }) => d.embedding);
    let line: Record<string, unknown> | undefined;
    for (let i = 0; i < 200 && !line; i++) {
      line = logged
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((l) => l.msg === 'content');
      if (!line) await new Promise((r) => setTimeout(r, 10));
    }
    expect(line).toMatchObject({ route: 'embeddings', prompt_redacted: expect.stringContaining('[REDACTED:EMAIL]'), output_redacted: '[2 vectors of 4 dimensions]' });
    for (const v of vectors) expect(logged).not.toContain(v);
    expect(logged).not.toContain('x.y@example.com');
  });

  it('embeddingOutputSummary counts vectors and dimensions from the deltas without decoding', () => {
    const line = (dims: number) => `${Buffer.alloc(dims * 4, 7).toString('base64')}\n`;
    expect(embeddingOutputSummary(line(4) + line(4) + line(4))).toBe('[3 vectors of 4 dimensions]');
    expect(embeddingOutputSummary(line(384))).toBe('[1 vector of 384 dimensions]');
    expect(embeddingOutputSummary(line(5))).toBe('[1 vector of 5 dimensions]');
    expect(embeddingOutputSummary('')).toBe('[0 vectors]');
  });
});
