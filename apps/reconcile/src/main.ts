/**
 * `npm run reconcile` — the operator's reconciliation command (issue 4, deliverable 9).
 *
 * Usage:
 *   npm run reconcile -- [--since <ISO>] [--until <ISO>] [--fix] [--json]
 *                        [--nats-url <url>] [--namespace <ns>] [--no-stream]
 *                        [--engines <url,url,…>] [--engines-fresh | --no-engine-counters]
 *
 * 1. Settles usage rows marked `uncertain` (a relay lost mid-stream) from the engine replicas'
 *    own count of the generation (`GET /v1/generations/{id}/usage`), priced with the revision's
 *    prices, exactly once (only with `--fix`; without it, says what it would settle).
 * 2. With `--fix`, reconciles reservations with the ledger (admission's `reconcileReservations`
 *    over the Postgres admission store: held reservations past their expiry are settled from
 *    the ledger or released; settled amounts that differ from the ledger are corrected), then
 *    reports reservations still held past their expiry.
 * 3. Compares over the window `[since, until)` (by `finished_at`; default: everything until
 *    now): the ledger's sums per tenant and revision, the usage stream's records (a fresh
 *    ephemeral consumer; the ledger's durable consumer is untouched), the engines' token
 *    counters, and every row's cost against tokens × the revision's prices.
 *
 * The engines' counters cover everything since each replica started, so they match the ledger
 * only when every replica started fresh for the window: they are shown, and count as a
 * difference only with `--engines-fresh`. `--engines` names the engines to ask (default: the
 * configuration's replicas).
 *
 * Environment: DATABASE_URL (required), NATS_URL (default nats://127.0.0.1:4222),
 * WEIR_NATS_NAMESPACE (default weir), WEIR_CONFIG (prices and replicas; default the built-in
 * configuration), LOG_LEVEL.
 *
 * Exit status: 0 when everything agrees, 1 with the differences, 2 for bad arguments or when a
 * store cannot be reached.
 */
import { parseArgs } from 'node:util';
import { createAdmission } from '@weir/admission';
import { defaultConfig, loadConfigFile } from '@weir/config';
import type { PlatformConfig, RevisionPricing } from '@weir/core';
import { connectNats, natsNames } from '@weir/messaging-nats';
import { type EngineEndpoint, formatReport, runReconciliation } from '@weir/reconcile';
import { createPgAdmissionStore, createReconcileQueries, openDatabase } from '@weir/store-pg';

const USAGE = `usage: npm run reconcile -- [--since <ISO>] [--until <ISO>] [--fix] [--json] [--nats-url <url>] [--namespace <ns>] [--no-stream] [--engines <url,url>] [--engines-fresh | --no-engine-counters]
environment: DATABASE_URL (required), NATS_URL, WEIR_NATS_NAMESPACE, WEIR_CONFIG`;

class UsageError extends Error {}

function parseDate(name: string, value: string | undefined): Date | undefined {
  if (value === undefined) return undefined;
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new UsageError(`--${name}: expected an ISO-8601 date-time such as 2026-11-30T00:00:00Z, got ${JSON.stringify(value)}`);
  return d;
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      since: { type: 'string' },
      until: { type: 'string' },
      fix: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      'nats-url': { type: 'string' },
      namespace: { type: 'string' },
      'no-stream': { type: 'boolean', default: false },
      engines: { type: 'string' },
      'engines-fresh': { type: 'boolean', default: false },
      'no-engine-counters': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const since = parseDate('since', values.since);
  const until = parseDate('until', values.until);
  if (since && until && since >= until) throw new UsageError('--since must be before --until');
  if (values['engines-fresh'] && values['no-engine-counters']) throw new UsageError('--engines-fresh and --no-engine-counters exclude each other');
  const databaseUrl = process.env.DATABASE_URL?.trim();
  if (!databaseUrl) {
    throw new UsageError(
      'DATABASE_URL is required, e.g. postgres://postgres@127.0.0.1:5432/weir (an all-in-one on its embedded PGlite cannot be reconciled while it runs: PGlite serves one process; run it with DATABASE_URL to reconcile it live)',
    );
  }

  const config: PlatformConfig = process.env.WEIR_CONFIG ? loadConfigFile(process.env.WEIR_CONFIG) : defaultConfig();
  const pricing = new Map<string, RevisionPricing>(config.revisions.map((r) => [r.id, r.pricing]));
  const enginesByRevision = new Map<string, EngineEndpoint[]>(
    config.revisions.map((r) => [r.id, (r.replicas ?? []).map((x) => ({ replicaId: x.id, baseUrl: x.baseUrl }))]),
  );
  const engines = (values.engines ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((url) => {
      if (!/^https?:\/\/[^/]+/.test(url)) throw new UsageError(`--engines: expected http(s) URLs separated by commas, got ${JSON.stringify(url)}`);
      return { replicaId: url, baseUrl: url };
    });

  const database = await openDatabase({ databaseUrl, migrate: false, maxConnections: 2 });
  const nc = values['no-stream']
    ? undefined
    : await connectNats({ servers: values['nats-url'] ?? process.env.NATS_URL ?? 'nats://127.0.0.1:4222', name: 'weir-reconcile' });
  try {
    const queries = createReconcileQueries(database.db);
    const report = await runReconciliation(
      {
        since,
        until,
        tenants: config.tenants,
        pricing,
        enginesByRevision,
        engines,
        engineCounters: values['no-engine-counters'] ? 'off' : values['engines-fresh'] ? 'assert' : 'report',
        fix: values.fix,
        ...(nc ? { usageStream: natsNames(values.namespace ?? process.env.WEIR_NATS_NAMESPACE ?? 'weir').usageStream } : {}),
      },
      {
        queries,
        nats: nc,
        reconcileReservations: () => createAdmission({ tenants: config.tenants }, { store: createPgAdmissionStore(database.db) }).reconcileReservations(),
        countExpiredHeld: (now) => queries.countHeldPastExpiry(now),
      },
    );
    // The report is this command's output (stdout), not a log line; it holds no prompt or output text.
    process.stdout.write(`${values.json ? JSON.stringify(report, null, 2) : formatReport(report)}\n`);
    return report.ok ? 0 : 1;
  } finally {
    await nc?.close().catch(() => undefined);
    await database.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    const hint = /stream not found/i.test(message)
      ? ' (no usage stream under this NATS namespace: the all-in-one writes none — run with --no-stream — or set --namespace / WEIR_NATS_NAMESPACE to the deployment\'s)'
      : '';
    const usage = error instanceof UsageError || (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION';
    process.stderr.write(`${usage ? `${message}\n${USAGE}` : `reconcile failed: ${message}${hint}`}\n`);
    process.exit(2);
  },
);
