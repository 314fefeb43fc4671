/**
 * The batch runner over the real Postgres batch store (PGlite) and a real gateway (scripted
 * engine): items run through the gateway's own route at batch priority with one idempotency key
 * each; a runner that dies after its item ran but before it wrote the result leaves the item to
 * be retried when the lease expires, and the retry replays the first run's answer — one
 * generation, one usage record, one result; a batch whose tenant's budget is refused pauses
 * (in progress, with the reason) and resumes; results are fenced by the lease.
 */
import { type AdmissionService, type BatchStore, type Caller, type EngineAdapter, type EngineEvent, type EngineRequest, type ReserveResult, type UsageRecord } from '@weir/core';
import { UNBILLED_INTERRUPTION_MARK } from '@weir/ledger';
import { createPgBatchStore, createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { sql } from 'kysely';
import { createMemoryIdempotencyStore } from '../idempotency';
import { startTestGateway, type TestGateway, twoTenantConfig } from '../test-support';
import type { InternalRequest, InternalResponse } from '../internal-dispatch';
import { type BatchRunner, startBatchRunner } from './runner';
import { DEFAULT_BATCH_LIMITS } from './validate';

jest.setTimeout(60_000);

const caller: Caller = { tenantId: 't', appId: 'a', apiKeyId: 'k' };
const silent = { info() {}, warn() {}, error() {} };

/** An engine answering `w0 w1 w2` (4 input tokens, 3 output). */
function engine(): EngineAdapter {
  return {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    async countInputTokens() {
      return 4;
    },
    async *generate(_request: EngineRequest): AsyncIterable<EngineEvent> {
      for (let n = 0; n < 3; n++) yield { type: 'delta', text: `w${n} `, tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 4, outputTokens: 3 }, usageSource: 'reported' };
    },
    async close() {},
  };
}

/** Polls until `probe` returns a value (generous bound). */
async function eventually<T>(probe: () => Promise<T | undefined>, what: string, boundMs = 20_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() - started > boundMs) throw new Error(`${what} did not happen within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function readAll(store: BatchStore, id: string): Promise<string[]> {
  const parts: Buffer[] = [];
  for await (const c of store.readFile('t', id)) parts.push(c);
  return Buffer.concat(parts).toString('utf8').split('\n').filter(Boolean);
}

/** A batch of `n` chat lines created as tenant `t` (the route's work, done on the store). */
async function createBatch(store: BatchStore, n: number): Promise<string> {
  const w = await store.createFile('t', 'batch', 'in.jsonl');
  const text = Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'fake', messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 3 } })).join('\n');
  await w.append(Buffer.from(text));
  await w.commit(text.length, n);
  const id = `batch_${Math.random().toString(36).slice(2)}`;
  const nowS = Math.floor(Date.now() / 1000);
  await store.createBatch({ id, tenantKey: 't', caller, endpoint: '/v1/chat/completions', inputFileId: w.id, completionWindow: '24h', metadata: null, createdAtS: nowS, expiresAtS: nowS + 86_400 });
  return id;
}

describe('batch runner', () => {
  let database: TestDatabase;
  let store: BatchStore;
  let harness: TestGateway;
  let records: UsageRecord[];
  let nextReserve: (() => ReserveResult | undefined) | undefined;
  let runner: BatchRunner | undefined;

  beforeAll(async () => {
    database = await createTestDatabase({ kind: 'pglite' });
    store = createPgBatchStore(database.db);
  }, 30_000);
  afterAll(() => database.close());

  beforeEach(async () => {
    await sql`DELETE FROM batches`.execute(database.db);
    await sql`DELETE FROM batch_files`.execute(database.db);
    nextReserve = undefined;
    let n = 0;
    const admission: AdmissionService = {
      async reserve() {
        const forced = nextReserve?.();
        return forced ?? { ok: true, reservationId: `rsv_${++n}`, rateLimits: { requests: { limit: 60, remaining: 59, resetMs: 1000 }, tokens: { limit: 10_000, remaining: 9_000, resetMs: 1000 } } };
      },
      async settle() {},
      async release() {},
    };
    harness = await startTestGateway({ config: twoTenantConfig(), engine: engine(), admission, idempotency: createMemoryIdempotencyStore() });
    records = harness.records;
  });
  afterEach(async () => {
    await runner?.stop(5_000);
    runner = undefined;
    await harness.close();
  });

  const start = (dispatch: (c: Caller, r: InternalRequest) => Promise<InternalResponse>, extra: { leaseMs?: number; budgetPauseMs?: number; concurrency?: number } = {}) =>
    (runner = startBatchRunner({ store, dispatch, logger: silent, limits: DEFAULT_BATCH_LIMITS, pollMs: 20, ...extra }));

  it('runs every item through the gateway at batch priority, one usage record each, filed under the batch and line', async () => {
    const id = await createBatch(store, 5);
    const sent: InternalRequest[] = [];
    start((c, r) => {
      sent.push(r);
      return harness.gateway.dispatch(c, r);
    });
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    // Batch class (the scheduler's batch lane, `priorityOf`), one idempotency key per line.
    expect(sent.map((r) => r.headers?.['x-weir-priority'])).toEqual(Array(5).fill('batch'));
    expect(done).toMatchObject({ total: 5, completed: 5, failed: 0, usage: { inputTokens: 20, outputTokens: 15 } });
    expect(records.map((r) => r.requestId).sort()).toEqual([0, 1, 2, 3, 4].map((i) => `${id}-${i}`).sort());
    const lines = (await readAll(store, done.outputFileId as string)).map((l) => JSON.parse(l));
    expect(lines.map((l) => l.custom_id)).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
    expect(lines[0].response).toMatchObject({ status_code: 200, body: { object: 'chat.completion', choices: [{ message: { content: 'w0 w1 w2 ' } }] } });
    expect(lines[0].error).toBeNull();
  });

  it('retries an item whose runner died after running it: the retry replays the answer, never a second generation or charge', async () => {
    const id = await createBatch(store, 3);
    let died = false;
    const first: Record<string, unknown> = {};
    start(
      async (c, r) => {
        const answer = await harness.gateway.dispatch(c, r);
        const key = (r.headers ?? {})['idempotency-key'];
        if (key === `${id}-1` && !died) {
          died = true;
          first.body = answer.body;
          // The runner "dies" here: the item ran (and was billed), its result was never written.
          throw new Error('killed');
        }
        return answer;
      },
      { leaseMs: 300 },
    );
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    expect(died).toBe(true);
    expect(done).toMatchObject({ total: 3, completed: 3, failed: 0 });
    expect(records).toHaveLength(3);
    expect(records.filter((r) => r.requestId === `${id}-1`)).toHaveLength(1);
    const lines = (await readAll(store, done.outputFileId as string)).map((l) => JSON.parse(l));
    expect(lines).toHaveLength(3);
    expect(lines[1].response.body.id).toBe((first.body as { id: string }).id);
    const [row] = (await sql<{ attempts: number }>`SELECT attempts FROM batch_items WHERE batch_id = ${id} AND idx = 1`.execute(database.db)).rows;
    expect(Number(row.attempts)).toBe(2);
  });

  it('runs an item again under its next key when its key’s run was interrupted before any output (billed nothing): one result, one usage record', async () => {
    const id = await createBatch(store, 3);
    const keys: string[] = [];
    start(async (c, r) => {
      const key = (r.headers ?? {})['idempotency-key'] as string;
      keys.push(key);
      // What the gateway answers for a key whose process died before recording any output
      // (recovery marked it interrupted; open-generations.ts).
      if (key === `${id}-1`) {
        return { status: 409, headers: {}, body: { error: { code: 'conflict', message: `The generation for this key was interrupted: the process running it stopped before any of its output was recorded, so ${UNBILLED_INTERRUPTION_MARK}; send a new key to run it again` } } };
      }
      return harness.gateway.dispatch(c, r);
    });
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    expect(done).toMatchObject({ total: 3, completed: 3, failed: 0 });
    expect(keys.filter((k) => k.startsWith(`${id}-1`))).toEqual([`${id}-1`, `${id}-1-r1`]);
    expect(records.map((r) => r.requestId).sort()).toEqual([`${id}-0`, `${id}-1-r1`, `${id}-2`].sort());
    const lines = (await readAll(store, done.outputFileId as string)).map((l) => JSON.parse(l));
    expect(lines.find((l) => l.custom_id === 'c1').response.status_code).toBe(200);
  });

  it('keeps a 409 for a key whose interrupted run was billed (no second run, an error line)', async () => {
    const id = await createBatch(store, 2);
    const keys: string[] = [];
    start(async (c, r) => {
      const key = (r.headers ?? {})['idempotency-key'] as string;
      keys.push(key);
      if (key === `${id}-0`) return { status: 409, headers: {}, body: { error: { code: 'conflict', message: 'The generation for this idempotency key failed after producing 4 tokens, which were billed; send a new key to run it again.' } } };
      return harness.gateway.dispatch(c, r);
    });
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    expect(done).toMatchObject({ total: 2, completed: 1, failed: 1 });
    expect(keys.filter((k) => k.startsWith(`${id}-0`))).toEqual([`${id}-0`]);
  });

  it('pauses the batch while its tenant’s budget is refused, then resumes it', async () => {
    const id = await createBatch(store, 3);
    let refuse = true;
    nextReserve = () => (refuse ? { ok: false, reason: 'budget_exhausted', message: 'Monthly budget of 1 USD is spent.' } : undefined);
    start((c, r) => harness.gateway.dispatch(c, r), { budgetPauseMs: 200 });
    const paused = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.paused ? b : undefined;
    }, 'the batch pausing');
    expect(paused.status).toBe('in_progress');
    expect(paused.paused).toMatchObject({ reason: 'budget_exhausted', message: expect.stringContaining('budget') });
    expect(paused.completed + paused.failed).toBe(0);
    expect(records).toHaveLength(0);
    refuse = false;
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    expect(done).toMatchObject({ completed: 3, failed: 0, paused: null });
    expect(records).toHaveLength(3);
  });

  it('records a refused item (4xx) in the error file with its response', async () => {
    const w = await store.createFile('t', 'batch', 'in.jsonl');
    const text = JSON.stringify({ custom_id: 'x', method: 'POST', url: '/v1/chat/completions', body: { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] } });
    await w.append(Buffer.from(text));
    await w.commit(text.length, 1);
    const nowS = Math.floor(Date.now() / 1000);
    await store.createBatch({ id: 'batch_refused', tenantKey: 't', caller, endpoint: '/v1/chat/completions', inputFileId: w.id, completionWindow: '24h', metadata: null, createdAtS: nowS, expiresAtS: nowS + 86_400 });
    start((c, r) => harness.gateway.dispatch(c, r));
    const done = await eventually(async () => {
      const b = await store.getBatch('t', 'batch_refused');
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    expect(done).toMatchObject({ completed: 0, failed: 1, outputFileId: null });
    const [line] = (await readAll(store, done.errorFileId as string)).map((l) => JSON.parse(l));
    expect(line).toMatchObject({ custom_id: 'x', response: { status_code: 404, body: { error: { code: 'model_not_found' } } }, error: null });
    expect(records).toHaveLength(0);
  });

  it('expires a batch at its window: done items in the output, the rest as batch_expired errors', async () => {
    const id = await createBatch(store, 3);
    let reserves = 0;
    // The first item is admitted; then the budget is spent and the batch is held.
    nextReserve = () => (++reserves > 1 ? { ok: false, reason: 'budget_exhausted', message: 'Monthly budget is spent.' } : undefined);
    start((c, r) => harness.gateway.dispatch(c, r), { budgetPauseMs: 60_000, concurrency: 1 });
    await eventually(async () => ((await store.getBatch('t', id))?.paused ? true : undefined), 'the batch pausing');
    await sql`UPDATE batches SET expires_at_s = ${Math.floor(Date.now() / 1000) - 1} WHERE id = ${id}`.execute(database.db);
    runner?.poke();
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'expired' ? b : undefined;
    }, 'the batch expiring');
    expect(done).toMatchObject({ total: 3, completed: 1, failed: 2, paused: null });
    expect(typeof done.expiredAtS).toBe('number');
    expect((await readAll(store, done.outputFileId as string)).map((l) => JSON.parse(l).custom_id)).toEqual(['c0']);
    const errors = (await readAll(store, done.errorFileId as string)).map((l) => JSON.parse(l));
    expect(errors.map((e) => [e.custom_id, e.response, e.error.code])).toEqual([
      ['c1', null, 'batch_expired'],
      ['c2', null, 'batch_expired'],
    ]);
    expect(records).toHaveLength(1);
  });

  it('gives an item up with an error line after repeated runs that never recorded a result', async () => {
    const id = await createBatch(store, 1);
    start(
      async () => {
        throw new Error('the runner dies on this item every time');
      },
      { leaseMs: 50 },
    );
    const done = await eventually(async () => {
      const b = await store.getBatch('t', id);
      return b?.status === 'completed' ? b : undefined;
    }, 'the batch completing');
    expect(done).toMatchObject({ completed: 0, failed: 1 });
    const [line] = (await readAll(store, done.errorFileId as string)).map((l) => JSON.parse(l));
    expect(line).toMatchObject({ custom_id: 'c0', response: null, error: { code: 'batch_item_failed' } });
    const [row] = (await sql<{ attempts: number }>`SELECT attempts FROM batch_items WHERE batch_id = ${id}`.execute(database.db)).rows;
    expect(Number(row.attempts)).toBe(9);
  });
});
