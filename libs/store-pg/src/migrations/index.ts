import type { Migration, MigrationProvider } from 'kysely';
import { identityAndUsage } from './0001-identity-and-usage';
import { usageUncertain } from './0002-usage-uncertain';
import { admissionAndIdempotency } from './0003-admission-and-idempotency';
import { usageByTime } from './0005-usage-by-time';
import { usageReconciliations } from './0006-usage-reconciliations';
import { idempotencyByGeneration } from './0007-idempotency-by-generation';
import { controlPlane } from './0008-control-plane';
import { evals } from './0009-evals';
import { moneyPath } from './0010-money-path';
import { leaseDemand } from './0011-lease-demand';
import { internalIds } from './0012-internal-ids';
import { responseCache } from './0013-response-cache';
import { semanticCache } from './0014-semantic-cache';
import { redactionProfiles } from './0015-redaction-profiles';
import { responseCacheBounds } from './0016-response-cache-bounds';
import { tokenClasses } from './0017-token-classes';
import { useCaseScopes } from './0018-use-case-scopes';
import { batches } from './0020-batches';

/**
 * Weir's one migration history, for PGlite and Postgres alike. Names sort in the order they
 * run (`NNNN_snake_case`); kysely refuses to start if the database has run a migration this
 * list lacks or if a new one sorts before the last one run. Append only: never rename,
 * reorder or edit a migration that has shipped.
 */
export const MIGRATIONS: Readonly<Record<string, Migration>> = Object.freeze({
  '0001_identity_and_usage': identityAndUsage,
  '0002_usage_uncertain': usageUncertain,
  '0003_admission_and_idempotency': admissionAndIdempotency,
  '0005_usage_by_time': usageByTime,
  '0006_usage_reconciliations': usageReconciliations,
  '0007_idempotency_by_generation': idempotencyByGeneration,
  '0008_control_plane': controlPlane,
  '0009_evals': evals,
  '0010_money_path': moneyPath,
  '0011_lease_demand': leaseDemand,
  '0012_internal_ids': internalIds,
  '0013_response_cache': responseCache,
  '0014_semantic_cache': semanticCache,
  '0015_redaction_profiles': redactionProfiles,
  '0016_response_cache_bounds': responseCacheBounds,
  '0017_token_classes': tokenClasses,
  '0018_use_case_scopes': useCaseScopes,
  '0020_batches': batches,
});

/** An in-code kysely {@link MigrationProvider} over {@link MIGRATIONS} (no filesystem scan). */
export const migrationProvider: MigrationProvider = {
  getMigrations: async () => ({ ...MIGRATIONS }),
};
