/**
 * `npm run reconcile` — the operator's reconciliation command (docs/reconciliation.md).
 *
 * Usage:
 *   npm run reconcile -- [--since <ISO>] [--until <ISO>] [--fix] [--json] [--data-dir <dir>]
 *                        [--nats-url <url>] [--namespace <ns>] [--no-stream]
 *                        [--engines <url,url,…>] [--engines-fresh | --no-engine-counters]
 *
 * The store: `DATABASE_URL` (a Postgres server: the split, or an all-in-one run on Postgres),
 * else the all-in-one's data directory (`--data-dir`, `WEIR_DATA_DIR`, default `.data`): its
 * embedded PGlite database and settlement journal, under the all-in-one's own lock — refused
 * while the all-in-one runs.
 *
 * Prices, budgets and replicas come from the control plane's store (the latest configuration
 * snapshot; each ledger row priced by the snapshot current when it finished); `WEIR_CONFIG` (or
 * the built-in default) only when the store holds no snapshot.
 *
 * Report only, unless `--fix`, which: recovers the stopped all-in-one's settlement journal
 * (what its next start would do), frees what it left running, settles estimated and uncertain
 * rows from the engines' own counts, settles or releases reservations past expiry, and reclaims
 * leases past `hold_until` + grace (on the stopped all-in-one: all of them). Then it checks
 * every hold, settled + reserved + leased ≤ budget, leased = Σ of the leases, and compares the
 * ledger over `[since, until)` with the usage stream, the engines' counters and tokens × prices.
 *
 * Environment: DATABASE_URL, WEIR_DATA_DIR, NATS_URL (default nats://127.0.0.1:4222),
 * WEIR_NATS_NAMESPACE (default weir), WEIR_CONFIG, LOG_LEVEL, WEIR_TLS_CA / WEIR_TLS_CERT /
 * WEIR_TLS_KEY (engine replicas with mutual TLS: a certificate naming `reconcile`, which may read
 * their counters and per-generation usage; docs/security.md §8).
 *
 * Exit status: 0 when everything agrees, 1 with the differences, 2 for bad arguments, a store
 * that cannot be opened (e.g. the all-in-one runs on it) or reached.
 */
import { parseArgs } from 'node:util';
import { createAdmission } from '@weir/admission';
import { connectNats, natsAuthFromEnv, natsNames } from '@weir/messaging-nats';
import {
  describeConfigSource,
  type EngineEndpoint,
  fetchEngineCounters,
  lookupGenerationUsage,
  formatReport,
  loadReconcileConfig,
  openReconcileStore,
  ReconcileStoreError,
  type ReconcileTarget,
  runReconciliation,
} from '@weir/reconcile';
import { createServiceTlsAgent, loadServiceTls } from '@weir/service-tls';
import { createPgAdmissionStore, createPgLeaseStore, createReconcileQueries, expireOrphans } from '@weir/store-pg';
import { fetch as undiciFetch } from 'undici';

const USAGE = `usage: npm run reconcile -- [--since <ISO>] [--until <ISO>] [--fix] [--json] [--data-dir <dir>] [--nats-url <url>] [--namespace <ns>] [--no-stream] [--engines <url,url>] [--engines-fresh | --no-engine-counters]
environment: DATABASE_URL (a Postgres server; unset: the stopped all-in-one's data directory), WEIR_DATA_DIR (default .data), NATS_URL, WEIR_NATS_NAMESPACE, WEIR_CONFIG (only when the store holds no configuration)`;

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
      'data-dir': { type: 'string' },
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
  const engines: EngineEndpoint[] = (values.engines ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((url) => {
      if (!/^https?:\/\/[^/]+/.test(url)) throw new UsageError(`--engines: expected http(s) URLs separated by commas, got ${JSON.stringify(url)}`);
      return { replicaId: url, baseUrl: url };
    });

  const databaseUrl = process.env.DATABASE_URL?.trim();
  if (databaseUrl && values['data-dir']) throw new UsageError('--data-dir names an embedded database; unset DATABASE_URL to use it');
  const target: ReconcileTarget = databaseUrl
    ? { kind: 'postgres', databaseUrl }
    : { kind: 'embedded', dataDir: values['data-dir'] ?? (process.env.WEIR_DATA_DIR?.trim() || '.data') };
  // The all-in-one writes no usage stream: on its data directory there is none to read.
  const readStream = target.kind === 'postgres' && !values['no-stream'];

  // Engine replicas with mutual TLS are read with this command's certificate (`reconcile`).
  const tls = loadServiceTls(process.env, { service: 'reconcile' });
  const engineAgent = tls ? createServiceTlsAgent(tls, { expectedServer: 'engine' }) : undefined;
  const engineFetch = engineAgent
    ? ((url: string, init?: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: engineAgent })) as unknown as typeof fetch
    : undefined;
  const store = await openReconcileStore(target, { fix: values.fix });
  try {
    const queries = createReconcileQueries(store.database.db);
    const { config, prices, source } = await loadReconcileConfig(queries, { configPath: process.env.WEIR_CONFIG?.trim() || undefined });
    const enginesByRevision = new Map<string, EngineEndpoint[]>(
      config.revisions.map((r) => [r.id, (r.replicas ?? []).map((x) => ({ replicaId: x.id, baseUrl: x.baseUrl }))]),
    );
    const nc = readStream ? await connectNats({ servers: values['nats-url'] ?? process.env.NATS_URL ?? 'nats://127.0.0.1:4222', name: 'weir-reconcile', auth: natsAuthFromEnv(process.env) }) : undefined;
    try {
      const db = store.database.db;
      const report = await runReconciliation(
        {
          since,
          until,
          tenants: config.tenants,
          pricing: prices,
          enginesByRevision,
          engines,
          engineCounters: values['no-engine-counters'] ? 'off' : values['engines-fresh'] ? 'assert' : 'report',
          fix: values.fix,
          ownerStopped: store.ownerStopped,
          configSource: describeConfigSource(source),
          ...(nc ? { usageStream: natsNames(values.namespace ?? process.env.WEIR_NATS_NAMESPACE ?? 'weir').usageStream } : {}),
        },
        {
          queries,
          nats: nc,
          journal: store.journal,
          expireOrphans: () => expireOrphans(db),
          // This run has just asked the engines about every uncertain row: a reservation whose
          // row stays uncertain is settled at the row's recorded cost now (a later engine count
          // corrects it), not held for the admission service's 10 minutes.
          reconcileReservations: () => createAdmission({ tenants: config.tenants, uncertainHoldMs: 0 }, { store: createPgAdmissionStore(db) }).reconcileReservations(),
          leaseStore: createPgLeaseStore(db),
          ...(engineFetch
            ? {
                fetchCounters: (url: string) => fetchEngineCounters(url, { fetch: engineFetch }),
                lookup: (url: string, id: string) => lookupGenerationUsage(url, id, { fetch: engineFetch }),
              }
            : {}),
        },
      );
      if (store.migrated.length > 0) report.notes.unshift(`the embedded database was migrated first (${store.migrated.join(', ')}), as the all-in-one's next start would`);
      // The report is this command's output (stdout), not a log line; it holds no prompt or output text.
      process.stdout.write(`${values.json ? JSON.stringify(report, null, 2) : formatReport(report)}\n`);
      return report.ok ? 0 : 1;
    } finally {
      await nc?.close().catch(() => undefined);
    }
  } finally {
    await store.close();
    await engineAgent?.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    const hint = /stream not found/i.test(message)
      ? " (no usage stream under this NATS namespace: set --namespace / WEIR_NATS_NAMESPACE to the deployment's, or pass --no-stream)"
      : '';
    const usage = error instanceof UsageError || (error as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION';
    const refused = error instanceof ReconcileStoreError;
    process.stderr.write(`${usage ? `${message}\n${USAGE}` : refused ? `reconcile: ${message}` : `reconcile failed: ${message}${hint}`}\n`);
    process.exit(2);
  },
);
