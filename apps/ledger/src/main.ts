/**
 * The ledger service (split topology): applies the settlement journal — the settlement entries
 * relays publish to the durable JetStream usage stream (`createNatsSettlementJournal`) — to
 * Postgres with the settlement applier (ADR 0002 §2: usage row, attempts, budget rows, leases
 * and idempotency result in one transaction), and runs the burn-rate check (alerts on
 * `<namespace>.alerts.burn_rate`, metrics `weir_tenant_burn_rate_ratio` and
 * `weir_burn_rate_alerts_total`). Usage records of producers still on the older usage sink are
 * inserted as rows only (admission settled them). A batch is acknowledged only after its
 * commit, and both writes are idempotent on `generation_id`, so a restart or a redelivery never
 * loses or double-bills a settlement (at-least-once delivery, exactly-once effect). Several
 * instances share the durable consumer and split the work.
 *
 * Environment: DATABASE_URL, NATS_URL, WEIR_NATS_NAMESPACE (default weir: deployments sharing a NATS server need different ones), HOST, OPS_PORT (default 9465), LEDGER_ACK_WAIT_MS (default
 * 5000: how soon JetStream redelivers what a killed ledger had taken but not acknowledged),
 * LEDGER_BATCH_LINGER_MS (default 10: how long a batch that is not full waits for more entries, so
 * a trickle is applied in fewer transactions; 0 = at once),
 * WEIR_CONFIG (optional: its `defaults.admission.burn_rate_*`; else the defaults),
 * WEIR_BURN_RATE_INTERVAL_MS (default 60000: time between burn-rate checks), LOG_LEVEL.
 */
import { loadConfigFile } from '@weir/config';
import { type BurnRateAlert, DEFAULT_ADMISSION } from '@weir/core';
import { createBurnRateMonitor } from '@weir/ledger';
import { burnRateAlertCodec, connectNats, natsAuthFromEnv, createNatsSettlementSource, createNatsTopic, ensureUsageStream, natsNames } from '@weir/messaging-nats';
import { envInt, envRequired, envString, readEnv, runUntilSignal, startOpsServer } from '@weir/service-runtime';
import { applyIsolating, createPgSettlementApplier, createUsageQueries, createUsageRepository, openDatabase } from '@weir/store-pg';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { installTracing } from '@weir/transport-grpc';

const env = readEnv({
  DATABASE_URL: envRequired('the Postgres URL, e.g. postgres://postgres@127.0.0.1:5432/weir'),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  HOST: envString('127.0.0.1'),
  OPS_PORT: envInt(9465, 0, 65535),
  LEDGER_ACK_WAIT_MS: envInt(5_000, 1_000),
  // A batch that is not full waits this long for more entries (one transaction for several
  // instead of one each at low rates); 0 = apply whatever arrived at once.
  LEDGER_BATCH_LINGER_MS: envInt(10, 0, 1_000),
  WEIR_CONFIG: envString(''),
  WEIR_BURN_RATE_INTERVAL_MS: envInt(60_000, 100),
  LOG_LEVEL: envString('info'),
});
// NATS credentials and TLS (NATS_CREDS, NATS_USER + NATS_PASSWORD_FILE, NATS_TLS_CA, …), read once: a bad setting stops the start.
const natsAuth = natsAuthFromEnv(process.env);
const logger = createLogger({ name: 'ledger', level: env.LOG_LEVEL as 'info' });

runUntilSignal('ledger', logger, async () => {
  installTracing();
  const telemetry = createTelemetry({ serviceName: 'weir-ledger' });
  const database = await openDatabase({ databaseUrl: env.DATABASE_URL, logger });
  const repository = createUsageRepository(database.db);
  const nc = await connectNats({ servers: env.NATS_URL, name: 'weir-ledger', auth: natsAuth, logger });
  const names = natsNames(env.WEIR_NATS_NAMESPACE);
  await ensureUsageStream(nc, { stream: names.usageStream, subjects: [`${names.usageSubjectPrefix}.>`] });
  const applier = createPgSettlementApplier(database.db);
  const journal = `jetstream:${names.usageStream}`;
  const source = createNatsSettlementSource(nc, { logger, stream: names.usageStream, durable: names.ledgerDurable, ackWaitMs: env.LEDGER_ACK_WAIT_MS, lingerMs: env.LEDGER_BATCH_LINGER_MS });
  let written = 0;
  await source.start(async (batch) => {
    if (batch.usageRecords.length > 0) await repository.insertMany(batch.usageRecords);
    written += batch.usageRecords.length;
    if (batch.items.length === 0) return;
    // A settlement the database refuses for its data is set aside (logged), never wedging the stream.
    const result = await applyIsolating(applier, { journal, items: batch.items, position: { segment: 0, offset: batch.lastSequence } }, ({ item, error }) => {
      const usage = item.kind === 'settle' ? item.entry.usage : undefined;
      logger.error({ err: error, generationId: usage?.generationId, tenantId: usage?.tenantId, costNanoUsd: usage?.costNanoUsd }, 'settlement refused by the database; skipped');
    });
    if (result.overspends.length > 0) logger.error({ overspends: result.overspends.map(({ leaseId, reason, excessNano }) => ({ leaseId, reason, excessNano })) }, 'settlement exceeded its leases');
    written += result.inserted;
  });
  const admissionDefaults = env.WEIR_CONFIG ? loadConfigFile(env.WEIR_CONFIG).defaults.admission : DEFAULT_ADMISSION;
  const burnRate = createBurnRateMonitor(
    { settings: admissionDefaults, intervalMs: env.WEIR_BURN_RATE_INTERVAL_MS },
    {
      spend: createUsageQueries(database.db),
      alerts: createNatsTopic<BurnRateAlert>(nc, names.burnRateAlertSubject, burnRateAlertCodec, { logger }),
      metrics: telemetry.metrics,
      logger,
    },
  );
  burnRate.start();
  let draining = false;
  const ops = await startOpsServer({
    host: env.HOST,
    port: env.OPS_PORT,
    readiness: () => (draining ? { ready: false, reason: 'draining' } : nc.isClosed() ? { ready: false, reason: 'nats closed' } : { ready: true }),
    metricsHandler: telemetry.metricsHandler,
  });
  logger.info({ ops: ops.port }, 'ledger consuming usage records');
  return {
    async stop() {
      draining = true;
      await burnRate.stop();
      await source.stop();
      logger.info({ written }, 'ledger stopped consuming');
      await nc.drain().catch(() => undefined);
      await database.close();
      await ops.close();
      await telemetry.shutdown();
    },
  };
});
