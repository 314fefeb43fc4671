/**
 * The Postgres idempotency store on PGlite and on the machine's real Postgres: claims, the
 * race between two gateways on one key (exactly one wins), completion by the claimant only,
 * takeover of expired claims, retained results by generation id, and purging.
 */
import type { GenerationOutcome, RetainedResult } from '@weir/core';
import { createPgIdempotencyStore } from './idempotency-store';
import { startKeyHolder } from './key-holder';
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
    await database.db.deleteFrom('key_holders').execute();
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

  describe('a key whose holder (a gateway) died', () => {
    const holderStore = (holder: string) => createPgIdempotencyStore(database.db, { now: () => now, holder, deadHolderWaitMs: 1_000, interruptedRetentionMs: 3_600_000 });

    it('is left running while its holder heartbeats, and marked interrupted once the heartbeat is older than the wait', async () => {
      const beat = await startKeyHolder(database.db, { holder: 'gw-a', ttlMs: 3_000, intervalMs: 60_000, now: () => now });
      try {
        expect(await holderStore('gw-a').claim(claim('gen_1'))).toEqual({ claimed: true });
        const retry = holderStore('gw-b');
        // Alive (and within ttl + wait): the retry waits, as before.
        now += 3_500;
        expect(await retry.claim(claim('gen_2'))).toMatchObject({ claimed: false, existing: { state: 'running', generationId: 'gen_1' } });
        // The heartbeat stopped 4.001 s ago (expiry 3 s + wait 1 s): interrupted, never run again.
        now += 501;
        const told = await retry.claim(claim('gen_3'));
        expect(told).toMatchObject({ claimed: false, existing: { state: 'interrupted', generationId: 'gen_1' } });
        expect(told.claimed ? '' : told.existing.interruption).toMatch(/gen_1.*interrupted.*new key/);
        // Kept for the retention, not the claim's lease: a retry long after is still told.
        now += 120_000;
        expect(await retry.claim(claim('gen_4'))).toMatchObject({ claimed: false, existing: { state: 'interrupted', generationId: 'gen_1' } });
      } finally {
        beat.stop();
      }
    });

    it('treats a holder with no row as dead, and leaves a key that finished (the ledger wrote the result) as it is', async () => {
      expect(await holderStore('gw-gone').claim(claim('gen_1'))).toEqual({ claimed: true });
      // The relay's settlement arrived first: the ledger wrote the result (and cleared the holder).
      await database.db.updateTable('idempotency_keys').set({ state: 'done', result: JSON.stringify(result('gen_1')), holder: null }).execute();
      now += 10_000;
      const got = await holderStore('gw-b').claim(claim('gen_2'));
      expect(got).toMatchObject({ claimed: false, existing: { state: 'done', result: result('gen_1') } });
      await database.db.deleteFrom('idempotency_keys').execute();
      expect(await holderStore('gw-gone').claim(claim('gen_5'))).toEqual({ claimed: true });
      now += 1_001;
      expect(await holderStore('gw-b').claim(claim('gen_6'))).toMatchObject({ claimed: false, existing: { state: 'interrupted', generationId: 'gen_5' } });
    });

    it('writes no result on complete when results come through the settlement journal', async () => {
      const s = createPgIdempotencyStore(database.db, { now: () => now, holder: 'gw-a', resultsFromJournal: true });
      await s.claim(claim('gen_1'));
      await s.complete('t', 'order-1', result('gen_1'), now + 3_600_000);
      expect(await s.get('t', 'order-1')).toMatchObject({ state: 'running', generationId: 'gen_1' });
    });
  });
});
