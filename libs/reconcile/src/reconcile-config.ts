/**
 * The configuration reconciliation checks against: the control plane's store (the latest
 * configuration snapshot in Postgres — what every service of the deployment runs — and the
 * prices of every earlier snapshot), falling back to a configuration file only when the store
 * holds no snapshot (a database no control plane has seeded yet).
 */
import { defaultConfig, loadConfigFile, parseConfig } from '@weir/config';
import type { PlatformConfig } from '@weir/core';
import type { ReconcileQueries } from '@weir/store-pg';
import { createPriceBook, type PriceBook, pricesOfStoredRevisions } from './price-book';

/** Where the configuration came from. */
export type ReconcileConfigSource =
  | { kind: 'store'; version: number; issuedAt: string; snapshots: number }
  | { kind: 'file'; path: string }
  | { kind: 'default' };

/** The configuration of a run. */
export interface ReconcileConfig {
  source: ReconcileConfigSource;
  /** The current configuration: tenants (budgets) and revisions (replicas). */
  config: PlatformConfig;
  /** Prices by revision and time (every stored snapshot's; the file's for every time). */
  prices: PriceBook;
  /** Revision entries of stored snapshots that had no readable prices (0 normally). */
  skippedRevisions: number;
}

/** Options of {@link loadReconcileConfig}. */
export interface LoadReconcileConfigOptions {
  /** `WEIR_CONFIG`: read only when the store holds no snapshot; unset → the built-in default configuration. */
  configPath?: string;
}

/**
 * Reads the latest stored snapshot (parsed with `parseConfig`, as every service applies it) and
 * the prices of every stored snapshot; with none stored, the configuration file (or the built-in
 * default).
 * @throws ConfigError when the latest snapshot or the fallback file is invalid; the database's
 *   error when it cannot be read.
 */
export async function loadReconcileConfig(queries: Pick<ReconcileQueries, 'latestConfigSnapshot' | 'snapshotRevisions'>, options: LoadReconcileConfigOptions = {}): Promise<ReconcileConfig> {
  const latest = await queries.latestConfigSnapshot();
  if (!latest) {
    const config = options.configPath ? loadConfigFile(options.configPath) : defaultConfig();
    const prices = createPriceBook([{ version: 0, issuedAt: new Date(0), pricing: new Map(config.revisions.map((r) => [r.id, r.pricing])) }]);
    return { source: options.configPath ? { kind: 'file', path: options.configPath } : { kind: 'default' }, config, prices, skippedRevisions: 0 };
  }
  const config = parseConfig(JSON.stringify(latest.config), `stored configuration snapshot v${latest.version}`, { format: 'json' });
  const history = await queries.snapshotRevisions();
  let skippedRevisions = 0;
  const snapshots = history.map((h) => {
    const { pricing, skipped } = pricesOfStoredRevisions(h.revisions);
    skippedRevisions += skipped;
    return { version: h.version, issuedAt: h.issuedAt, pricing };
  });
  return {
    source: { kind: 'store', version: latest.version, issuedAt: latest.issuedAt.toISOString(), snapshots: history.length },
    config,
    prices: createPriceBook(snapshots),
    skippedRevisions,
  };
}

/** One line saying where the configuration came from, for the report. */
export function describeConfigSource(source: ReconcileConfigSource): string {
  switch (source.kind) {
    case 'store':
      return `the control plane's store (snapshot v${source.version} of ${source.issuedAt}; prices from ${source.snapshots} snapshot(s))`;
    case 'file':
      return `the configuration file ${source.path} (the store holds no configuration snapshot)`;
    default:
      return 'the built-in default configuration (the store holds no configuration snapshot and WEIR_CONFIG is unset)';
  }
}
