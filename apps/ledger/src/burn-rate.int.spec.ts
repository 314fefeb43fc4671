/**
 * The ledger's burn-rate check as `main.ts` wires it, on real services: ledger rows in a
 * throwaway Postgres database, the periodic monitor, and its alert on the deployment's NATS
 * subject (the shared server, a namespace of its own), read by a plain NATS subscriber.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { type BurnRateAlert, DEFAULT_ADMISSION, newId, type UsageRecord } from '@weir/core';
import { createBurnRateMonitor, type BurnRateMonitor } from '@weir/ledger';
import { burnRateAlertCodec, connectNats, createNatsTopic, natsNames } from '@weir/messaging-nats';
import { createTestDatabase, createUsageQueries, createUsageRepository, type TestDatabase } from '@weir/store-pg';
import { uniqueTag } from '@weir/testing';

const NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';
const HOUR = 3_600_000;

function record(tenantId: string, finishedAtMs: number, costNanoUsd: number): UsageRecord {
  return {
    generationId: newId('gen'),
    requestId: newId('req'),
    tenantId,
    appId: 'app',
    apiKeyId: 'key',
    route: 'generations',
    modelAlias: 'tiny',
    modelRevision: 'tiny@1',
    inputTokens: 1,
    outputTokens: 1,
    cachedInputTokens: 0,
    costNanoUsd,
    status: 'completed',
    finishReason: 'stop',
    errorCode: null,
    queueMs: 0,
    ttftMs: 1,
    totalMs: 1,
    startedAt: new Date(finishedAtMs - 1),
    finishedAt: new Date(finishedAtMs),
  };
}

describe('burn-rate alerts on NATS', () => {
  let database: TestDatabase;
  let publisher: NatsConnection;
  let subscriber: NatsConnection;
  let monitor: BurnRateMonitor | undefined;

  beforeAll(async () => {
    database = await createTestDatabase();
    const tag = uniqueTag();
    [publisher, subscriber] = await Promise.all([
      connectNats({ servers: NATS_URL, name: `weir-test-burn-pub-${tag}` }),
      connectNats({ servers: NATS_URL, name: `weir-test-burn-sub-${tag}` }),
    ]);
  });

  afterAll(async () => {
    await monitor?.stop();
    await Promise.all([publisher?.close(), subscriber?.close()]);
    await database?.close();
  });

  it('publishes one alert for the tenant whose last hour is over 3× its baseline, on <namespace>.alerts.burn_rate', async () => {
    const now = Date.now();
    const hot = newId('hot');
    const calm = newId('calm');
    await createUsageRepository(database.db).insertMany([
      // hot: 24 USD over the 24 h baseline (1 USD/h), then 5 USD in the last hour.
      ...Array.from({ length: 24 }, (_, h) => record(hot, now - HOUR - (h + 0.5) * HOUR, 1_000_000_000)),
      record(hot, now - HOUR / 2, 5_000_000_000),
      // calm: the same baseline, 2 USD in the last hour.
      ...Array.from({ length: 24 }, (_, h) => record(calm, now - HOUR - (h + 0.5) * HOUR, 1_000_000_000)),
      record(calm, now - HOUR / 2, 2_000_000_000),
    ]);

    const subject = natsNames(`bt-${uniqueTag()}`).burnRateAlertSubject;
    const received: BurnRateAlert[] = [];
    subscriber.subscribe(subject, { callback: (err, msg) => void (err ? undefined : received.push(burnRateAlertCodec.decode(msg.data))) });
    await subscriber.flush();

    monitor = createBurnRateMonitor(
      { settings: DEFAULT_ADMISSION, intervalMs: 200 },
      { spend: createUsageQueries(database.db), alerts: createNatsTopic(publisher, subject, burnRateAlertCodec) },
    );
    monitor.start();
    // Several checks run in a second: debounced to one alert.
    const until = Date.now() + 10_000;
    while (received.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 1_000));
    await monitor.stop();

    expect(subject).toMatch(/^bt-[a-z0-9]+\.alerts\.burn_rate$/);
    expect(received).toEqual([
      { type: 'burn_rate', tenant_id: hot, hourly_spend_usd: 5, baseline_hourly_usd: 1, factor: 3, ratio: 5, at: expect.any(String) },
    ]);
    expect(Math.abs(Date.parse(received[0].at) - now)).toBeLessThan(30_000);
  });
});
