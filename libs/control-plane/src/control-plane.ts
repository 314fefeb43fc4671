import { type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import { isConfigError, newModelPathProblems, parseConfig, processEgressPolicy } from '@weir/config';
import type { WeirSchema } from '@weir/store-pg';
import { InvalidChangeError } from './admin-error';
import { composeConfig } from './compose-config';
import type { ConfigFileObject } from './config-shapes';
import type { RevocationToPublish, SnapshotSink } from './snapshot-sink';

/** The snapshot contract's schema version (`schema_version` of every snapshot). */
export const SNAPSHOT_SCHEMA_VERSION = 1;

/**
 * Key of the Postgres transaction-level advisory lock every change takes, so changes commit
 * one at a time: versions never collide and each snapshot includes every earlier change.
 */
const CHANGE_LOCK_KEY = '6148914691236517205';

/** Who made a change: an admin token (`id`, `label`) or the system (`system:seed`). */
export interface Actor {
  id: string;
  label: string;
}

/** What a change is, for the audit log. */
export interface ChangeDescription {
  actor: Actor;
  /** `<entity>.<verb>`, e.g. `tenant.create`, `alias.rollback`. */
  action: string;
  entityType: string;
  entityId: string;
}

/** A revocation to record and publish on the fast path (its `seq` and `issued_at` are assigned on commit). */
export type RevocationRequest = Omit<RevocationToPublish, 'seq' | 'issued_at'>;

/** What a change's `apply` step returns. */
export interface AppliedChange<T> {
  /** The entity before (undefined/null when it did not exist), for the audit log. */
  before: unknown;
  /** The entity after (undefined/null when deleted), for the audit log. */
  after: unknown;
  /** What the caller gets back. */
  result: T;
  /** Fast-path revocations this change implies. */
  revocations?: RevocationRequest[];
}

/** A committed change. */
export interface CommittedChange<T> {
  result: T;
  /** The snapshot version this change produced, or null for a change outside the configuration (admin tokens). */
  version: number | null;
}

/** The slice of a logger the control plane uses (pino fits). */
export interface ControlPlaneLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** Options of {@link createControlPlane}. */
export interface ControlPlaneOptions {
  /**
   * How long a change waits for its publication before answering anyway (the publication
   * goes on in the background and is retried). Default 5,000 ms.
   */
  publishWaitMs?: number;
}

/** Dependencies of {@link createControlPlane}. */
export interface ControlPlaneDeps {
  db: Kysely<WeirSchema>;
  sink: SnapshotSink;
  logger?: ControlPlaneLogger;
  /** The clock (snapshot and revocation `issued_at`). Default `() => new Date()`. */
  now?: () => Date;
}

/** The control plane's store: transactional changes that each yield a validated, audited snapshot. */
export interface ControlPlane {
  readonly db: Kysely<WeirSchema>;
  /**
   * Runs one change in ONE transaction: `apply` (which may throw a WeirError: nothing is
   * committed), then — unless `options.snapshot` is false — compose the configuration,
   * validate it with `parseConfig` (problems → {@link InvalidChangeError}, nothing committed)
   * and insert the next `config_snapshots` version; write the audit entry (who, what, before,
   * after, when) and the revocations; commit. After commit it publishes the pending
   * revocations and the latest snapshot through the sink (a failure is logged and retried).
   */
  change<T>(description: ChangeDescription, apply: (trx: Transaction<WeirSchema>) => Promise<AppliedChange<T>>, options?: { snapshot?: boolean }): Promise<CommittedChange<T>>;
  /**
   * Publishes unpublished revocations (in `seq` order) and the latest snapshot if it was not
   * published yet. Never rejects: failures are logged and left for the next call. Calls are
   * serialized.
   * @returns true when nothing is left unpublished.
   */
  flush(): Promise<boolean>;
  /** Like {@link flush}, but publishes the latest snapshot even if it was published before (start-up). */
  republishLatest(): Promise<boolean>;
  /** The latest snapshot version this process published (heartbeats name it), or undefined before the first. */
  publishedVersion(): number | undefined;
  /** Calls {@link flush} every `intervalMs` (e.g. with each heartbeat) until the returned stop is called. */
  startPublishRetry(intervalMs: number): () => void;
  /** Waits for a publication in progress. */
  close(): Promise<void>;
}

/**
 * Inserts the next snapshot version for `config` (already validated) inside `trx`, which must
 * hold the change lock. Returns the version.
 */
export async function insertSnapshot(trx: Transaction<WeirSchema>, config: ConfigFileObject, createdBy: string, issuedAt: Date): Promise<number> {
  const row = await trx.selectFrom('config_snapshots').select(sql<string>`coalesce(max(version), 0) + 1`.as('next')).executeTakeFirstOrThrow();
  const version = Number(row.next);
  await trx
    .insertInto('config_snapshots')
    .values({ version, schema_version: SNAPSHOT_SCHEMA_VERSION, issued_at: issuedAt, config: JSON.stringify(config), created_by: createdBy })
    .execute();
  return version;
}

/** Takes the change lock for the rest of `trx`. */
export async function lockChanges(trx: Transaction<WeirSchema>): Promise<void> {
  await sql`select pg_advisory_xact_lock(${CHANGE_LOCK_KEY}::bigint)`.execute(trx);
}

/**
 * Validates a composed configuration with `parseConfig` (the data plane's own parser).
 * @throws InvalidChangeError listing every problem.
 */
export function validateComposed(config: ConfigFileObject): void {
  try {
    parseConfig(JSON.stringify(config), 'admin change', { format: 'json' });
  } catch (err) {
    if (isConfigError(err)) throw new InvalidChangeError(err.problems, { cause: err });
    throw err;
  }
}

/** Writes one audit entry inside `trx`. */
export async function writeAudit(trx: Transaction<WeirSchema>, d: ChangeDescription, before: unknown, after: unknown, version: number | null, at: Date): Promise<void> {
  await trx
    .insertInto('audit_log')
    .values({
      at,
      actor_id: d.actor.id,
      actor_label: d.actor.label,
      action: d.action,
      entity_type: d.entityType,
      entity_id: d.entityId,
      before: before === undefined || before === null ? null : JSON.stringify(before),
      after: after === undefined || after === null ? null : JSON.stringify(after),
      snapshot_version: version,
    })
    .execute();
}

/** A `revocations` row in the snapshot contract's fields. */
function revocationToPublish(r: Selectable<WeirSchema['revocations']>): RevocationToPublish {
  return {
    seq: Number(r.seq),
    kind: r.kind,
    ...(r.tenant_id !== null ? { tenant_id: r.tenant_id } : {}),
    ...(r.api_key_id !== null ? { api_key_id: r.api_key_id } : {}),
    ...(r.api_key_sha256 !== null ? { api_key_sha256: r.api_key_sha256 } : {}),
    ...(r.enabled !== null ? { enabled: r.enabled } : {}),
    issued_at: r.issued_at.toISOString(),
  };
}

/** Creates the {@link ControlPlane} over `deps.db`, publishing through `deps.sink`. */
export function createControlPlane(options: ControlPlaneOptions, deps: ControlPlaneDeps): ControlPlane {
  const { db, sink, logger } = deps;
  const now = deps.now ?? (() => new Date());
  const publishWaitMs = options.publishWaitMs ?? 5_000;
  let chain: Promise<boolean> = Promise.resolve(true);
  let publishedVersion: number | undefined;

  const publish = async (force: boolean): Promise<boolean> => {
    try {
      const pending = await db.selectFrom('revocations').selectAll().where('published_at', 'is', null).orderBy('seq').execute();
      for (const r of pending) {
        await sink.publishRevocation(revocationToPublish(r));
        await db.updateTable('revocations').set({ published_at: now() }).where('seq', '=', r.seq as never).execute();
        logger?.info({ seq: Number(r.seq), kind: r.kind, tenant: r.tenant_id ?? undefined }, 'revocation published');
      }
      const latest = await db.selectFrom('config_snapshots').select(['version', 'issued_at', 'config', 'published_at']).orderBy('version', 'desc').limit(1).executeTakeFirst();
      if (latest && (force || latest.published_at === null)) {
        // Every revocation is published by now (above), and each was committed with the snapshot that includes it.
        const lastRevocation = await db.selectFrom('revocations').selectAll().orderBy('seq', 'desc').limit(1).executeTakeFirst();
        await sink.publishSnapshot({
          version: Number(latest.version),
          config: latest.config,
          issuedAt: latest.issued_at.toISOString(),
          ...(lastRevocation ? { lastRevocation: revocationToPublish(lastRevocation) } : {}),
        });
        publishedVersion = Math.max(publishedVersion ?? 0, Number(latest.version));
        await db.updateTable('config_snapshots').set({ published_at: now() }).where('version', '=', latest.version).execute();
        logger?.info({ version: Number(latest.version) }, 'snapshot published');
      }
      return true;
    } catch (err) {
      logger?.warn({ err }, 'publishing the configuration failed; retrying on the next change or retry tick (Postgres keeps it)');
      return false;
    }
  };
  const enqueue = (force: boolean) => (chain = chain.then(() => publish(force)));

  return {
    db,
    async change(description, apply, changeOptions = {}) {
      const withSnapshot = changeOptions.snapshot ?? true;
      const committed = await db.transaction().execute(async (trx) => {
        await lockChanges(trx);
        // An admin change may not point a revision at a model file outside the directories the
        // configuration already uses (issue 14); the configuration before it says which.
        const before = withSnapshot ? await composeConfig(trx) : undefined;
        const applied = await apply(trx);
        const at = now();
        let version: number | null = null;
        if (withSnapshot) {
          const config = await composeConfig(trx);
          validateComposed(config);
          const refused = newModelPathProblems(processEgressPolicy(), (before?.revisions ?? []) as never, (config.revisions ?? []) as never);
          if (refused.length > 0) throw new InvalidChangeError(refused);
          version = await insertSnapshot(trx, config, description.actor.id, at);
        }
        await writeAudit(trx, description, applied.before, applied.after, version, at);
        for (const r of applied.revocations ?? []) {
          await trx
            .insertInto('revocations')
            .values({
              kind: r.kind,
              tenant_id: r.tenant_id ?? null,
              api_key_id: r.api_key_id ?? null,
              api_key_sha256: r.api_key_sha256 ?? null,
              enabled: r.enabled ?? null,
              issued_at: at,
            })
            .execute();
        }
        return { result: applied.result, version, revoked: (applied.revocations ?? []).length > 0 };
      });
      logger?.info({ action: description.action, entity: description.entityId, actor: description.actor.id, version: committed.version }, 'change committed');
      if (committed.version !== null || committed.revoked) {
        const published = enqueue(false);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([published, new Promise<void>((resolve) => (timer = setTimeout(resolve, publishWaitMs)))]);
        clearTimeout(timer);
      }
      return { result: committed.result, version: committed.version };
    },
    flush: () => enqueue(false),
    republishLatest: () => enqueue(true),
    publishedVersion: () => publishedVersion,
    startPublishRetry(intervalMs) {
      const timer = setInterval(() => void enqueue(false), intervalMs);
      timer.unref();
      return () => clearInterval(timer);
    },
    async close() {
      await chain;
    },
  };
}
