/**
 * The JetStream settlement journal and the ledger's settlement source on the shared NATS
 * server, applied with the real settlement applier on Postgres: an append resolves after the
 * PubAck, the entry arrives whole, a batch is acked only after the applier committed (a failed
 * commit is redelivered and applied once), older usage records still arrive as usage rows.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import type { SettlementEntry } from '@weir/core';
import { createPgSettlementApplier, createTestDatabase, createUsageRepository, type TestDatabase } from '@weir/store-pg';
import { buildReservationRef, buildSettlementEntry, buildUsageRecord, uniqueTag, waitUntil } from '@weir/testing';
import { createNatsSettlementJournal } from './nats-settlement-journal';
import { type SettlementBatchFromStream, createNatsSettlementSource } from './nats-settlement-source';
import { usageStreamFixture } from './test-support';

describe('NATS settlement journal', () => {
  let fx: Awaited<ReturnType<typeof usageStreamFixture>>;
  let database: TestDatabase;
  let tag: string;
  beforeAll(async () => {
    database = await createTestDatabase({ kind: 'postgres' });
  }, 60_000);
  afterAll(() => database?.close());
  beforeEach(async () => {
    tag = uniqueTag();
    fx = await usageStreamFixture();
  });
  afterEach(() => fx.cleanup());

  const journal = (options = {}) => createNatsSettlementJournal(fx.nc, { subjectPrefix: fx.subjectPrefix, publishTimeoutMs: 1_000, ...options });
  const source = () => createNatsSettlementSource(fx.nc, { stream: fx.stream, durable: fx.durable, ackWaitMs: 2_000, retryBaseMs: 100, retryMaxMs: 300, pullExpiresMs: 5_000 });
  const entry = (i: number, extra: Partial<SettlementEntry> = {}) =>
    buildSettlementEntry(i, { tenantId: `t_${tag}`, appId: 'web', costNanoUsd: 1_000 + i, reservation: buildReservationRef(`g${i}`, []), usageSource: 'counted' }, tag, extra);

  it('resolves append once JetStream stored the entry, whole, once per generation', async () => {
    const j = journal();
    const e = entry(1, {
      idempotency: { tenantId: `t_${tag}`, key: 'k1', outcome: { kind: 'interrupted', generationId: `gen_${tag}_1`, message: 'm' }, retainUntilMs: 5 },
    });
    await j.append(e);
    const jsm = await jetstreamManager(fx.nc);
    expect((await jsm.streams.info(fx.stream)).state.messages).toBe(1);
    await j.append(e);
    expect((await jsm.streams.info(fx.stream)).state.messages).toBe(1);
    expect(j.stats()).toMatchObject({ appended: 2, acked: 2, duplicates: 1 });
    const stored = await jsm.streams.getMessage(fx.stream, { seq: 1 });
    expect(stored?.header.get('Nats-Msg-Id')).toBe(e.usage.generationId);

    const got: SettlementBatchFromStream[] = [];
    const s = source();
    await s.start(async (b) => {
      got.push(b);
    });
    await waitUntil(() => got.length > 0, 10_000, 'a batch');
    expect(got[0]).toEqual({ items: [{ kind: 'settle', entry: e }], usageRecords: [], lastSequence: 1 });
    await s.stop();
  });

  it('rejects an append JetStream never acknowledges (no stream), after its timeout, and refuses appends after close', async () => {
    const j = createNatsSettlementJournal(fx.nc, { subjectPrefix: `nowhere.${tag}`, publishTimeoutMs: 100, appendTimeoutMs: 400, retryBaseMs: 20, retryMaxMs: 50 });
    await expect(j.append(entry(1))).rejects.toMatchObject({ code: 'internal', retryable: true });
    expect(j.stats().rejected).toBe(1);
    await expect(j.append(buildSettlementEntry(2, { costNanoUsd: -1 }))).rejects.toMatchObject({ code: 'internal' });
    await j.close();
    await expect(j.append(entry(3))).rejects.toMatchObject({ code: 'shutting_down' });
  });

  it('is applied by the ledger exactly once, acked only after the commit; older usage records become rows without a charge', async () => {
    const j = journal();
    const entries = [0, 1, 2, 3].map((i) => entry(i));
    await Promise.all(entries.map((e) => j.append(e)));
    // A producer still on the usage sink (admission settled its reservation itself).
    const sink = fx.sink();
    const legacy = buildUsageRecord(9, { tenantId: `t_${tag}`, appId: 'web', costNanoUsd: 50_000 }, tag);
    sink.record(legacy);
    await sink.flush();

    const applier = createPgSettlementApplier(database.db);
    const repo = createUsageRepository(database.db);
    let calls = 0;
    let committed = 0;
    const s = source();
    await s.start(async (batch) => {
      calls++;
      if (calls === 1) throw new Error('database away (expected by the test)');
      await repo.insertMany(batch.usageRecords);
      const r = await applier.apply({ journal: `jetstream:${fx.stream}`, items: batch.items, position: { segment: 0, offset: batch.lastSequence } });
      committed += r.inserted;
    });
    await waitUntil(() => committed >= 4, 15_000, 'settlements applied');
    await s.stop();

    const { rows } = await sql<{ settled: string }>`select settled_nano::text as settled from budget_periods where scope = ${`tenant:t_${tag}`} and period = 'month'`.execute(database.db);
    // 1,000 + 1,001 + 1,002 + 1,003: the legacy record's 50,000 was charged by admission, not here.
    expect(rows[0].settled).toBe('4006');
    expect((await repo.getUsage(entries[2].usage.generationId))?.usageSource).toBe('counted');
    expect((await repo.getUsage(legacy.generationId))?.costNanoUsd).toBe(50_000);
    expect(await applier.position(`jetstream:${fx.stream}`)).toEqual({ segment: 0, offset: 5 });

    // Redelivered (a fresh consumer on a new durable reads it all again): nothing more is charged.
    const again = createNatsSettlementSource(fx.nc, { stream: fx.stream, durable: `${fx.durable}-again`, ackWaitMs: 2_000 });
    let seen = 0;
    await again.start(async (batch) => {
      await repo.insertMany(batch.usageRecords);
      await applier.apply({ journal: `jetstream:${fx.stream}`, items: batch.items });
      seen += batch.items.length + batch.usageRecords.length;
    });
    await waitUntil(() => seen >= 5, 10_000, 'redelivered');
    await again.stop();
    const { rows: after } = await sql<{ settled: string }>`select settled_nano::text as settled from budget_periods where scope = ${`tenant:t_${tag}`} and period = 'month'`.execute(database.db);
    expect(after[0].settled).toBe('4006');
  });
});
