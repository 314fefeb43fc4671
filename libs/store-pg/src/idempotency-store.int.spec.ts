/**
 * The Postgres idempotency store on PGlite and on the machine's real Postgres: claims, the
 * race between two gateways on one key (exactly one wins), completion by the claimant only,
 * takeover of expired claims, retained results by generation id, and purging.
 */
import type { GenerationOutcome, RetainedResult } from '@weir/core';
import { createPgIdempotencyStore } from './idempotency-store';
import { createTestDatabase, type TestDatabase } from './testing';

const outcome: GenerationOutcome = {
  finishReason: 'stop',
  usage: { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0 },
  costNanoUsd: 5_000,
  modelRevision: 'm@1',
  timings: { queueMs: 1, ttftMs: 2, totalMs: 3 },
};
const result = (generationId: string): RetainedResult => ({
  generationId,
  requestId: 'order-1',
  route: 'generations',
  modelRevision: 'm@1',
  createdS: 1_700_000_000,
  deltas: ['Once', ' upon', ' a time — ✓'],
  outcome,
});

describe.each([['pglite' as const], ['postgres' as const]])('pg idempotency store on %s', (kind) => {
  let database: TestDatabase;
  let now = Date.parse('2026-11-30T12:00:00Z');
  beforeAll(async () => {
    database = await createTestDatabase({ kind });
  }, 30_000);
  afterAll(() => database.close());
  beforeEach(async () => {
    await database.db.deleteFrom('idempotency_keys').execute();
    now = Date.parse('2026-11-30T12:00:00Z');
  });
  const store = () => createPgIdempotencyStore(database.db, { now: () => now });
  const claim = (generationId: string, tenantId = 't') => ({
    tenantId,
    requestId: 'order-1',
    bodySha256: 'a'.repeat(64),
    generationId,
    route: 'generations' as const,
    leaseUntilMs: now + 60_000,
  });

  it('lets exactly one of many concurrent claims win, and shows the others the winner', async () => {
    const s = store();
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => s.claim(claim(`gen_${i}`))));
    const winners = results.filter((r) => r.claimed);
    expect(winners).toHaveLength(1);
    const losers = results.filter((r) => !r.claimed);
    const holder = new Set(losers.map((r) => (r.claimed ? '' : r.existing.generationId)));
    expect(holder.size).toBe(1);
    expect((await s.get('t', 'order-1'))?.generationId).toBe([...holder][0]);
  });

  it('keeps tenants apart', async () => {
    const s = store();
    expect(await s.claim(claim('gen_a', 't'))).toEqual({ claimed: true });
    expect(await s.claim(claim('gen_b', 'u'))).toEqual({ claimed: true });
  });

  it('retains the result of the claimant only, finds it by generation id, and round-trips the text', async () => {
    const s = store();
    await s.claim(claim('gen_1'));
    expect(await s.findClaimByGeneration('t', 'gen_1')).toMatchObject({ state: 'running', generationId: 'gen_1' });
    await s.complete('t', 'order-1', result('gen_other'), now + 3_600_000);
    expect((await s.get('t', 'order-1'))?.state).toBe('running');
    await s.complete('t', 'order-1', result('gen_1'), now + 3_600_000);
    const got = await s.get('t', 'order-1');
    expect(got).toMatchObject({ state: 'done', generationId: 'gen_1', bodySha256: 'a'.repeat(64), route: 'generations' });
    expect(got?.result).toEqual(result('gen_1'));
    expect(await s.findResult('t', 'gen_1')).toEqual(result('gen_1'));
    expect(await s.findResult('u', 'gen_1')).toBeUndefined();
    expect(await s.findClaimByGeneration('t', 'gen_1')).toMatchObject({ state: 'done', requestId: 'order-1', result: result('gen_1') });
    expect(await s.findClaimByGeneration('u', 'gen_1')).toBeUndefined();
    const again = await s.claim(claim('gen_2'));
    expect(again).toMatchObject({ claimed: false, existing: { generationId: 'gen_1', state: 'done' } });
  });

  it('takes over an expired claim, and releases an abandoned one at once', async () => {
    const s = store();
    await s.claim(claim('gen_1'));
    now += 60_001;
    expect(await s.claim(claim('gen_2'))).toEqual({ claimed: true });
    await s.abandon('t', 'order-1', 'gen_1');
    expect((await s.get('t', 'order-1'))?.generationId).toBe('gen_2');
    await s.abandon('t', 'order-1', 'gen_2');
    expect(await s.claim(claim('gen_3'))).toEqual({ claimed: true });
  });

  it('purges expired keys only', async () => {
    const s = store();
    await s.claim(claim('gen_1'));
    await s.claim({ ...claim('gen_2', 'u'), leaseUntilMs: now + 10 });
    expect(await s.purgeExpired(now + 1_000)).toBe(1);
    expect(await s.get('t', 'order-1')).toBeDefined();
  });
});
