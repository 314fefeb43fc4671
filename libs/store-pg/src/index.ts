export { openDatabase, type OpenDatabaseOptions, type WeirDatabase } from './database';
export { migrateToLatest, pendingMigrations } from './migrate';
export { MIGRATIONS, migrationProvider } from './migrations';
export type { StoreLogger } from './logger';
export type { WeirSchema, TenantsTable, AppsTable, ApiKeysTable, UsageLedgerTable } from './schema';
export {
  createUsageRepository,
  MAX_ROWS_PER_INSERT,
  type UsageLedgerRepository,
  type ListUsageQuery,
  type UsageTotalsQuery,
  type UsageTotals,
} from './usage-repository';
export { createUsageQueries, type UsageQueries } from './usage-query';
export { createApiKeyRepository, type ApiKeyRepository, type NewApiKey } from './api-key-repository';
export { createTenantRepository, type TenantRepository, type StoredTenant } from './tenant-repository';
export {
  createCachedApiKeyStore,
  type CachedApiKeyStore,
  type CachedApiKeyStoreOptions,
  type CachedApiKeyStoreDeps,
} from './cached-api-key-store';
export {
  createTemporaryPostgresDatabase,
  createTestDatabase,
  testAdminUrl,
  DEFAULT_TEST_ADMIN_URL,
  type TemporaryPostgresDatabase,
  type TestDatabase,
} from './testing';
export { bootstrapTenants, type BootstrapResult } from './bootstrap';
export { createPgAdmissionStore } from './admission-store';
export { createPgLeaseStore, applyLeaseSettlements } from './lease-store';
export {
  createReconcileQueries,
  type ReconcileQueries,
  type LedgerWindow,
  type UnsettledUsageRow,
  type CountSettlementWrite,
  type CountSettlementResult,
  type BudgetRowMoney,
  type LeasedMismatch,
  type LeaseRow,
  type HeldReservations,
  type StoredConfigSnapshot,
  type StoredRevisionsAt,
} from './reconcile-queries';
export { lockDataDir, dataDirLayout, DataDirInUseError, type DataDirLock, type DataDirLayout } from './data-dir-lock';
export { createPgIdempotencyStore, type PgIdempotencyStoreOptions } from './idempotency-store';
export { startKeyHolder, type KeyHolder, type KeyHolderOptions } from './key-holder';
export { expireOrphans, type OrphanReport } from './orphans';
export { createPgSettlementApplier, type PgSettlementApplierOptions } from './settlement-applier';
export {
  openFileSettlementJournal,
  type FileSettlementJournal,
  type FileSettlementJournalOptions,
  type FileSettlementJournalDeps,
  type FileSettlementJournalStats,
  type JournalRecovery,
} from './journal/file-settlement-journal';
export { encodeJournalLine, parseJournalSegment, type JournalLine, type ParsedSegment } from './journal/journal-line';
export {
  inspectFileSettlementJournal,
  readJournalDirectory,
  journalSegmentPath,
  type InspectSettlementJournalOptions,
  type SettlementJournalInspection,
  type JournalDirectoryRead,
} from './journal/journal-directory';
export { fsyncDirectoryTree } from './journal/fsync-tree';
export { applyIsolating, isDataError, type RejectedSettlement } from './settlement-isolation';
export { ensurePrivateDir, preparePrivateDataDir, privatizeTree, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, restrictUmask } from './private-data-dir';
export { createPgExactCacheTier, type PgExactCacheTier, type PgExactCacheTierOptions } from './pg-exact-cache-tier';
export { createPgSemanticStore, purgeExpiredSemanticEntries, type PgSemanticStoreOptions } from './semantic-store';
export { createPgBatchStore, type PgBatchStoreOptions } from './batch-store';
