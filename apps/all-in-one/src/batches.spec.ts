/**
 * Issue 17, OpenAI's Batch API on the all-in-one with the real tiny model, through the official
 * `openai` client: files.create → batches.create → retrieve until completed → files.content,
 * with one ledger record per item (its generation's request id names the batch and line);
 * every route refused across tenants (404); whole-file validation with line-numbered errors;
 * size and line limits; cancel; a batch held while its tenant's budget is spent and resumed
 * when the budget is raised.
 */
import { tinyModelPath } from '@weir/testing';
import OpenAI, { NotFoundError, toFile } from 'openai';
import type { Batch } from 'openai/resources/batches';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(180_000);

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

const DEMO_KEY = 'wk_batches1_' + 'B'.repeat(43);
const model = JSON.stringify(tinyModelPath());
const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 4, model_path: ${model} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 8
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
  - id: pricey@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${model} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 2
    pricing: { input_per_mtok: 0, output_per_mtok: 1000000 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
  - name: pricey
    revision: pricey@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 16 }
`;

const MAX_LINES = 300;
const MAX_BYTES = 256 * 1024;

let running: TestPlatform | undefined;
let platform: Platform;
let client: OpenAI;

async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${platform.url}/admin/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${platform.adminToken as string}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** Polls `probe` every 100 ms until it returns a value, for at most `boundMs` (a generous bound). */
async function eventually<T>(probe: () => Promise<T | undefined>, what: string, boundMs = 60_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() - started > boundMs) throw new Error(`${what} did not happen within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const chatLine = (i: number, alias = 'tiny-stories', maxTokens = 4) =>
  JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: alias, messages: [{ role: 'user', content: `Once upon a time ${i}` }], max_tokens: maxTokens } });

async function upload(c: OpenAI, lines: string[], name = 'input.jsonl') {
  return c.files.create({ file: await toFile(Buffer.from(lines.join('\n') + '\n'), name), purpose: 'batch' });
}

/** Polls a batch until it reaches a final status. */
async function settled(c: OpenAI, id: string): Promise<Batch> {
  return eventually(async () => {
    const b = await c.batches.retrieve(id);
    return ['completed', 'failed', 'expired', 'cancelled'].includes(b.status) ? b : undefined;
  }, `batch ${id} ending`, 120_000);
}

async function contentLines(c: OpenAI, fileId: string): Promise<Json[]> {
  const text = await (await c.files.content(fileId)).text();
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l));
}

/** A second tenant with its own key (through the admin API), once its key is admitted. */
async function createTenant(id: string, policy?: unknown): Promise<OpenAI> {
  expect((await admin('POST', '/tenants', { id, name: id, ...(policy ? { policy } : {}) })).status).toBe(201);
  expect((await admin('POST', `/tenants/${id}/apps`, { id: `${id}-app`, name: 'App' })).status).toBe(201);
  const key = await admin('POST', `/tenants/${id}/apps/${id}-app/keys`, { label: 'batches' });
  expect(key.status).toBe(201);
  const c = new OpenAI({ apiKey: key.body.key as string, baseURL: `${platform.url}/v1`, maxRetries: 0 });
  await eventually(async () => (await c.files.list().then(() => true).catch(() => undefined)) ?? undefined, `tenant ${id} reaching the gateway`);
  return c;
}

beforeAll(async () => {
  running = await startTestPlatform('batches', CONFIG, DEMO_KEY, { platform: { batch: { limits: { maxLines: MAX_LINES, maxFileBytes: MAX_BYTES }, runner: { pollMs: 100, budgetPauseMs: 300 } } } });
  platform = running.platform;
  client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${platform.url}/v1`, maxRetries: 0 });
});

afterAll(async () => {
  await running?.stop();
});

describe('the Batch API on the all-in-one (official openai client, real tiny model)', () => {
  let done: Batch;
  let outputs: Json[];
  const N = 120;

  it('runs a batch end to end: upload, create, poll until completed, download one line per input line', async () => {
    const usageBefore = (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as Json;
    const file = await upload(
      client,
      Array.from({ length: N }, (_, i) => chatLine(i)),
    );
    expect(file).toMatchObject({ object: 'file', purpose: 'batch', status: 'processed', filename: 'input.jsonl' });
    expect(await client.files.retrieve(file.id)).toMatchObject({ id: file.id, bytes: file.bytes });
    const created = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'nightly' } });
    expect(created).toMatchObject({ object: 'batch', status: 'validating', input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'nightly' } });
    expect(created.expires_at).toBe((created.created_at as number) + 86_400);
    done = await settled(client, created.id);
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: N, completed: N, failed: 0 });
    expect(done.error_file_id).toBeNull();
    expect(done.model).toBe('tiny-stories');
    expect(typeof done.in_progress_at).toBe('number');
    expect(typeof done.completed_at).toBe('number');
    outputs = await contentLines(client, done.output_file_id as string);
    expect(outputs.map((o) => o.custom_id)).toEqual(Array.from({ length: N }, (_, i) => `req-${i}`));
    for (const o of outputs) {
      expect(o.id).toMatch(/^batch_req_/);
      expect(o.error).toBeNull();
      expect(o.response.status_code).toBe(200);
      expect(o.response.request_id).toMatch(/^req_/);
      expect(o.response.body).toMatchObject({ object: 'chat.completion', model: 'tiny-stories', choices: [{ index: 0, message: { role: 'assistant' } }] });
      expect(o.response.body.usage.completion_tokens).toBeGreaterThan(0);
      expect(o.response.body.usage.completion_tokens).toBeLessThanOrEqual(4);
    }
    const sum = (k: 'prompt_tokens' | 'completion_tokens') => outputs.reduce((s, o) => s + (o.response.body.usage[k] as number), 0);
    expect(done.usage).toMatchObject({ input_tokens: sum('prompt_tokens'), output_tokens: sum('completion_tokens'), total_tokens: sum('prompt_tokens') + sum('completion_tokens') });
    // Exactly one usage record per item, for the item's own generation, filed under the batch and line.
    const usage = await eventually(async () => {
      const u = (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as Json;
      return u.requests >= usageBefore.requests + N ? u : undefined;
    }, 'the items in the ledger');
    expect(usage.requests).toBe(usageBefore.requests + N);
    expect(usage.tokens.input - usageBefore.tokens.input).toBe(sum('prompt_tokens'));
    expect(usage.tokens.output - usageBefore.tokens.output).toBe(sum('completion_tokens'));
    for (const [i, o] of outputs.entries()) {
      const generationId = `gen_${(o.response.body.id as string).slice('chatcmpl-'.length)}`;
      const g = (await (await fetch(`${platform.url}/v1/generations/${generationId}`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as Json;
      expect(g).toMatchObject({ generation_id: generationId, request_id: `${done.id}-${i}`, status: 'completed' });
      expect(g.usage).toMatchObject({ input_tokens: o.response.body.usage.prompt_tokens, output_tokens: o.response.body.usage.completion_tokens });
    }
  });

  it('lists files and batches with cursor pages, newest first', async () => {
    const more = await upload(client, [chatLine(0)], 'second.jsonl');
    const page1 = await client.files.list({ limit: 1 });
    expect(page1.data.map((f) => f.id)).toEqual([more.id]);
    expect(page1.has_more).toBe(true);
    const all: string[] = [];
    for await (const f of client.files.list({ limit: 1 })) all.push(f.id);
    expect(all).toContain(done.input_file_id);
    expect(all).toContain(done.output_file_id);
    expect(new Set(all).size).toBe(all.length);
    const batches: string[] = [];
    for await (const b of client.batches.list({ limit: 1 })) batches.push(b.id);
    expect(batches).toContain(done.id);
    await client.files.delete(more.id);
    await expect(client.files.retrieve(more.id)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('answers 404 to another tenant on every route, and lists it nothing', async () => {
    const other = await createTenant('other');
    const fileId = done.input_file_id;
    await expect(other.files.retrieve(fileId)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.files.content(done.output_file_id as string)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.files.delete(fileId)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.batches.retrieve(done.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.batches.cancel(done.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.batches.create({ input_file_id: fileId, endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toBeInstanceOf(NotFoundError);
    expect((await other.files.list()).data).toEqual([]);
    expect((await other.batches.list()).data).toEqual([]);
    // Still the owner's, whole.
    expect(await client.files.retrieve(fileId)).toMatchObject({ id: fileId });
    expect((await contentLines(client, done.output_file_id as string)).length).toBe(N);
    // Without a key: 401.
    const anon = await fetch(`${platform.url}/v1/batches/${done.id}`);
    expect(anon.status).toBe(401);
  });

  it('validates the whole file first and fails the batch with line-numbered errors, running nothing', async () => {
    const before = (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as Json;
    const lines = [
      chatLine(1),
      '{"custom_id": "x", "method": "POST",',
      chatLine(1),
      JSON.stringify({ custom_id: 'g', method: 'GET', url: '/v1/chat/completions', body: { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }] } }),
      JSON.stringify({ custom_id: 'e', method: 'POST', url: '/v1/embeddings', body: { model: 'tiny-stories', input: 'hi' } }),
      JSON.stringify({ custom_id: 'm', method: 'POST', url: '/v1/chat/completions', body: { model: 'tiny-stories' } }),
      '',
      JSON.stringify({ custom_id: 's', method: 'POST', url: '/v1/chat/completions', body: { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }], stream: true } }),
      JSON.stringify({ method: 'POST', url: '/v1/chat/completions', body: { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }] } }),
    ];
    const file = await upload(client, lines, 'bad.jsonl');
    const b = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const failed = await settled(client, b.id);
    expect(failed.status).toBe('failed');
    expect(typeof failed.failed_at).toBe('number');
    expect(failed.output_file_id).toBeNull();
    expect(failed.errors?.object).toBe('list');
    expect(failed.errors?.data?.map((e) => [e.line, e.code, e.param])).toEqual([
      [2, 'invalid_json_line', null],
      [3, 'duplicate_custom_id', 'custom_id'],
      [4, 'invalid_method', 'method'],
      [5, 'mismatched_url', 'url'],
      [6, 'invalid_body', 'body.messages'],
      [8, 'invalid_body', 'body.stream'],
      [9, 'missing_custom_id', 'custom_id'],
    ]);
    for (const e of failed.errors?.data ?? []) expect(e.message).toContain(`Line ${e.line}`);
    expect(failed.request_counts).toEqual({ total: 0, completed: 0, failed: 0 });
    const after = (await (await fetch(`${platform.url}/v1/usage?window=day`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json()) as Json;
    expect(after.requests).toBe(before.requests);
  });

  it('refuses bad creates: an unsupported endpoint or window, a missing file', async () => {
    const file = await upload(client, [chatLine(0)]);
    await expect(client.batches.create({ input_file_id: file.id, endpoint: '/v1/moderations', completion_window: '24h' })).rejects.toMatchObject({ status: 400, param: 'endpoint' });
    await expect(client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '1h' as '24h' })).rejects.toMatchObject({ status: 400, param: 'completion_window' });
    await expect(client.batches.create({ input_file_id: 'file_nope', endpoint: '/v1/chat/completions', completion_window: '24h' })).rejects.toBeInstanceOf(NotFoundError);
    // Another method: 405 naming every method the path takes.
    const put = await fetch(`${platform.url}/v1/files/${file.id}`, { method: 'PUT', headers: { authorization: `Bearer ${DEMO_KEY}` } });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('GET, DELETE');
  });

  it('enforces the file limits at upload with clear errors, keeping nothing', async () => {
    const before = (await client.files.list()).data.length;
    await expect(upload(client, Array.from({ length: MAX_LINES + 1 }, (_, i) => chatLine(i)))).rejects.toMatchObject({ status: 400, param: 'file', message: expect.stringContaining(`more than ${MAX_LINES} lines`) });
    const big = 'x'.repeat(MAX_BYTES + 1);
    await expect(client.files.create({ file: await toFile(Buffer.from(big), 'big.jsonl'), purpose: 'batch' })).rejects.toMatchObject({ status: 413 });
    await expect(client.files.create({ file: await toFile(Buffer.from(chatLine(0)), 'a.jsonl'), purpose: 'fine-tune' })).rejects.toMatchObject({ status: 400, param: 'purpose' });
    const notMultipart = await fetch(`${platform.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: '{}' });
    expect(notMultipart.status).toBe(415);
    expect((await client.files.list()).data.length).toBe(before);
  });

  it('cancels a batch: it ends cancelled, every line accounted for in the output or error file', async () => {
    const file = await upload(
      client,
      Array.from({ length: MAX_LINES }, (_, i) => chatLine(i, 'tiny-stories', 48)),
    );
    const b = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await eventually(async () => ((await client.batches.retrieve(b.id)).status === 'in_progress' ? true : undefined), 'the batch running');
    const cancelling = await client.batches.cancel(b.id);
    expect(['cancelling', 'cancelled']).toContain(cancelling.status);
    expect(typeof cancelling.cancelling_at).toBe('number');
    const ended = await settled(client, b.id);
    expect(ended.status).toBe('cancelled');
    expect(typeof ended.cancelled_at).toBe('number');
    const out = ended.output_file_id ? await contentLines(client, ended.output_file_id) : [];
    const err = ended.error_file_id ? await contentLines(client, ended.error_file_id) : [];
    expect(out.length + err.length).toBe(MAX_LINES);
    expect(err.length).toBeGreaterThan(0);
    expect(err[0].error).toEqual({ code: 'batch_cancelled', message: expect.any(String) });
    expect(ended.request_counts).toEqual({ total: MAX_LINES, completed: out.length, failed: err.length });
    await expect(client.batches.cancel(done.id)).rejects.toMatchObject({ status: 409 });
  });

  it('holds a batch while its tenant’s budget is spent (in progress, with the reason) and resumes it when the budget is raised', async () => {
    // 1 USD an output token, at most 2 tokens a request: a 4.50 USD budget runs out within a few items.
    const poor = await createTenant('poor', { limits: { monthly_budget_usd: 4.5 } });
    const file = await upload(
      poor,
      Array.from({ length: 8 }, (_, i) => chatLine(i, 'pricey', 2)),
    );
    const b = await poor.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const paused = await eventually(async () => {
      const r = (await (await fetch(`${platform.url}/v1/batches/${b.id}`, { headers: { authorization: `Bearer ${poor.apiKey}` } })).json()) as Json;
      return r.weir?.paused ? r : undefined;
    }, 'the batch pausing');
    expect(paused.status).toBe('in_progress');
    expect(paused.weir.paused.reason).toBe('budget_exhausted');
    expect(paused.request_counts.completed).toBeLessThan(8);
    expect(paused.request_counts.failed).toBe(0);
    expect((await admin('PATCH', '/tenants/poor/policy', { limits: { monthly_budget_usd: 1000 } })).status).toBe(200);
    const ended = await settled(poor, b.id);
    expect(ended.status).toBe('completed');
    expect(ended.request_counts).toEqual({ total: 8, completed: 8, failed: 0 });
    const out = await contentLines(poor, ended.output_file_id as string);
    expect(out.map((o) => o.response.status_code)).toEqual(Array(8).fill(200));
    const usage = await eventually(async () => {
      const u = (await (await fetch(`${platform.url}/v1/usage?window=month`, { headers: { authorization: `Bearer ${poor.apiKey}` } })).json()) as Json;
      return u.requests >= 8 ? u : undefined;
    }, 'the poor tenant’s items in the ledger');
    // One record per item: the refused attempts while paused reserved nothing and recorded nothing.
    expect(usage.requests).toBe(8);
  });
});
