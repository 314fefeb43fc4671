/**
 * One reconciliation run against a real ledger (PGlite) and a real usage stream (the shared
 * NATS server, a uniquely named stream) carrying both formats (usage records of the older sink
 * and settlements of the JetStream settlement journal), with a scripted engine replica over
 * HTTP that serves its per-generation usage and real Prometheus counters (@weir/telemetry).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { RevisionPricing, UsageRecord } from '@weir/core';
import { priceUsage } from '@weir/ledger';
import { connectNats, createNatsUsageSink, deleteStream, encodeSettlementMessage, encodeUsageRecord, ensureUsageStream } from '@weir/messaging-nats';
import { createReconcileQueries, createUsageRepository, openDatabase, type WeirDatabase } from '@weir/store-pg';
import { createTelemetry } from '@weir/telemetry';
import { buildUsageRecord, uniqueTag } from '@weir/testing';
import { runReconciliation, type RunReconciliationOptions } from './run-reconciliation';

const prices: RevisionPricing = { inputPerMTok: 0.1, outputPerMTok: 0.2, cachedInputPerMTok: 0.1 };
const pricing = new Map([['tiny@1', prices]]);
const tag = uniqueTag();
const stream = `WEIR_USAGE_RECONCILE_${tag}`;
const prefix = `weir-test.${tag}.usage`;

let database: WeirDatabase;
let nc: NatsConnection;
let engine: Server;
let engineUrl: string;
const counters = { inputTokens: 0, outputTokens: 0 };

const priced = (i: number, overrides: Partial<UsageRecord> = {}): UsageRecord => {
  const r = buildUsageRecord(i, { cachedInputTokens: 0, ...overrides }, tag);
  return { ...r, costNanoUsd: priceUsage(prices, r) };
};
// Six generations; #2 lost its relay mid-stream: the gateway recorded 4 relayed tokens, uncertain; the engine made 30.
const records = [priced(0), priced(1), priced(2, { outputTokens: 4, uncertain: true, status: 'failed', finishReason: 'error', errorCode: 'upstream_error' }), priced(3), priced(4), priced(5)];
const engineCount = { prompt_tokens: records[2].inputTokens, completion_tokens: 30 };

beforeAll(async () => {
  database = await openDatabase();
  nc = await connectNats({ servers: process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222', name: `weir-reconcile-test-${tag}` });
  await ensureUsageStream(nc, { stream, subjects: [`${prefix}.>`], maxAgeMs: 3_600_000 });
  const sink = createNatsUsageSink(nc, { subjectPrefix: prefix });
  for (const r of records.slice(0, 5)) sink.record(r);
  await sink.flush();
  // The last one as the settlement journal publishes it, and a key interrupted before any output (no row).
  const js = jetstream(nc);
  await js.publish(`${prefix}.${records[5].tenantId}`, encodeSettlementMessage({ kind: 'settle', entry: { usage: records[5] } }), { msgID: records[5].generationId });
  await js.publish(
    `${prefix}.${records[5].tenantId}`,
    encodeSettlementMessage({ kind: 'interrupted', idempotency: { tenantId: records[5].tenantId, key: 'k1', outcome: { kind: 'interrupted', generationId: 'gen_never', message: 'interrupted' }, retainUntilMs: Date.UTC(2026, 1, 1) } }),
  );
  // A copy published again after JetStream's duplicate window (no Nats-Msg-Id match): the ledger drops it, so must we.
  await jetstream(nc).publish(`${prefix}.${records[1].tenantId}`, encodeUsageRecord(records[1]));
  await createUsageRepository(database.db).insertMany(records);

  // The engine's counters: everything it produced, #2 with its true count.
  for (const r of records) counters.inputTokens += r.inputTokens;
  for (const r of records) counters.outputTokens += r === records[2] ? engineCount.completion_tokens : r.outputTokens;
  const telemetry = createTelemetry({ serviceName: 'scripted-engine' });
  telemetry.observeEngines(() => [{ replica: 'tiny@1/0', revision: 'tiny@1', ...counters, activeSequences: 0 }]);
  engine = createServer((req, res) => {
    if (req.url === '/metrics') return telemetry.metricsHandler(req as never, res as never);
    if (req.url === `/v1/generations/${records[2].generationId}/usage`) {
      res.setHeader('content-type', 'application/json');
      return res.end(JSON.stringify({ generation_id: records[2].generationId, ...engineCount, finished: true, finish_reason: 'aborted' }));
    }
    res.statusCode = 404;
    res.end('{"error":{"code":"not_found"}}');
  });
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  engineUrl = `http://127.0.0.1:${(engine.address() as AddressInfo).port}/v1`;
}, 60_000);

afterAll(async () => {
  engine?.closeAllConnections();
  await new Promise((r) => engine?.close(r));
  await deleteStream(nc, stream).catch(() => undefined);
  await nc?.close();
  await database?.close();
});

const options = (over: Partial<RunReconciliationOptions> = {}): RunReconciliationOptions => ({
  since: new Date(Date.UTC(2026, 0, 1)),
  pricing,
  enginesByRevision: new Map([['tiny@1', [{ replicaId: 'tiny@1/0', baseUrl: engineUrl }]]]),
  usageStream: stream,
  engineCounters: 'assert',
  ...over,
});

it('without --fix, reports the uncertain row it could settle and the engine counters that differ, and changes nothing', async () => {
  const queries = createReconcileQueries(database.db);
  const report = await runReconciliation(options(), { queries, nats: nc });
  expect(report.uncertain).toMatchObject({ found: 1, settled: [{ generationId: records[2].generationId, source: 'engine:tiny@1/0' }] });
  expect(report.ok).toBe(false);
  const { inputTokens: i, outputTokens: o } = counters;
  expect(report.differences).toEqual([`revision tiny@1: engines counted ${i} input / ${o} output tokens, the ledger ${i} / ${o - 26}`]);
  expect(report.usage.stream?.ok).toBe(true);
  expect(report.stream).toMatchObject({ read: true, duplicates: 1, differingDuplicates: 0, interruptions: 1, malformed: 0 });
  expect(await queries.listUnsettled({})).toHaveLength(1);
});

it('with --fix, settles it from the engine’s count exactly once, and then everything agrees', async () => {
  const queries = createReconcileQueries(database.db);
  const first = await runReconciliation(options({ fix: true }), { queries, nats: nc });
  expect(first.differences).toEqual([]);
  expect(first.ok).toBe(true);
  expect(first.uncertain.settled).toEqual([
    {
      generationId: records[2].generationId,
      modelRevision: 'tiny@1',
      was: 'uncertain',
      source: 'engine:tiny@1/0',
      // A row of the older usage sink: its reservation carries the charge, not its budget rows.
      budgetsMoved: false,
      overspends: [],
      before: { inputTokens: 12, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: records[2].costNanoUsd },
      after: { inputTokens: 12, outputTokens: 30, cachedInputTokens: 0, costNanoUsd: priceUsage(prices, { inputTokens: 12, outputTokens: 30 }) },
    },
  ]);
  expect(first.usage.ledgerTotals).toMatchObject({ records: 6, inputTokens: counters.inputTokens, outputTokens: counters.outputTokens });
  expect(first.engineCounters.comparisons).toEqual([
    { revisionId: 'tiny@1', replicas: ['tiny@1/0'], engine: counters, ledger: { inputTokens: counters.inputTokens, outputTokens: counters.outputTokens }, ok: true },
  ]);
  const again = await runReconciliation(options({ fix: true }), { queries, nats: nc });
  expect(again.uncertain).toMatchObject({ found: 0, settled: [] });
  expect(again.ok).toBe(true);
});

it('finds a ledger row the usage stream never carried, and a cost that is not tokens × prices', async () => {
  const stray = priced(40);
  await createUsageRepository(database.db).insertMany([stray, { ...priced(41), costNanoUsd: priced(41).costNanoUsd + 1 }]);
  const report = await runReconciliation(options({ engineCounters: 'off' }), { queries: createReconcileQueries(database.db), nats: nc });
  expect(report.ok).toBe(false);
  expect(report.differences).toEqual([
    expect.stringMatching(/^1 ledger row\(s\) whose cost is not tokens × prices, e\.g\. gen_.*_41/),
    expect.stringMatching(/^2 generation\(s\) in the ledger but not in the usage stream/),
  ]);
});
