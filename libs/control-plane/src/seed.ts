import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Kysely } from 'kysely';
import { loadConfigFile } from '@weir/config';
import type { WeirSchema } from '@weir/store-pg';
import { parse as parseYaml } from 'yaml';
import { composeConfig } from './compose-config';
import { absoluteModelPath, isJsonObject, listSection, stripNulls, type JsonObject } from './config-shapes';
import { insertSnapshot, lockChanges, validateComposed, writeAudit } from './control-plane';

/** What {@link seedFromConfigFile} did. */
export type SeedResult = { seeded: true; version: number; revisions: number; aliases: number; tenants: number } | { seeded: false; reason: 'not_empty' };

/** The actor recorded for a seed. */
export const SEED_ACTOR = { id: 'system:seed', label: 'seed from WEIR_CONFIG' } as const;

/**
 * Imports a configuration file (YAML or JSON, the file-based configuration) into an empty
 * control-plane store, in one transaction: revisions, aliases, tenants (upserted: services
 * may have bootstrapped them already) with their apps and policies, and defaults; then
 * composes and validates the result, writes snapshot version 1 (or the next) and one audit
 * entry (`config.seed`). Entities keep the file's order. A relative `engine.model_path` is
 * made absolute against the file's directory (a snapshot has no directory of its own).
 *
 * "Empty" means no revision and no snapshot yet; otherwise nothing is done
 * (`{seeded: false, reason: 'not_empty'}`): the database, not the file, is the source of truth.
 *
 * @throws ConfigError when the file cannot be read or is invalid (nothing is written).
 */
export async function seedFromConfigFile(db: Kysely<WeirSchema>, filePath: string, options: { now?: () => Date } = {}): Promise<SeedResult> {
  // Validates first (a ConfigError says what is wrong, or that the file cannot be read).
  loadConfigFile(filePath);
  const text = readFileSync(filePath, 'utf8');
  const raw = parseYaml(text) as JsonObject;
  const baseDir = path.dirname(path.resolve(filePath));
  const now = options.now ?? (() => new Date());

  return db.transaction().execute(async (trx): Promise<SeedResult> => {
    await lockChanges(trx);
    const revisionCount = await trx.selectFrom('model_revisions').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    const snapshotCount = await trx.selectFrom('config_snapshots').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    if (Number(revisionCount.n) > 0 || Number(snapshotCount.n) > 0) return { seeded: false, reason: 'not_empty' };

    const base = now().getTime();
    // Creation times one millisecond apart keep the file's order (the composer sorts by them).
    let tick = 0;
    const at = () => new Date(base - 1_000_000 + tick++);
    const revisions = listSection(raw.revisions);
    for (const r of revisions) {
      // The deprecation is the revision's one mutable part: it has its own column.
      const { deprecation, ...spec } = absoluteModelPath(r, baseDir);
      await trx
        .insertInto('model_revisions')
        .values({ id: String(r.id), spec: JSON.stringify(spec), deprecation: isJsonObject(deprecation) ? JSON.stringify(deprecation) : null, created_at: at(), updated_at: at() })
        .execute();
    }
    const aliases = listSection(raw.aliases);
    for (const a of aliases) {
      const { name, ...spec } = a;
      await trx.insertInto('model_aliases').values({ id: String(name), spec: JSON.stringify(spec), created_at: at(), updated_at: at() }).execute();
    }
    const tenants = listSection(raw.tenants);
    for (const t of tenants) {
      const { id, name, apps, ...policy } = t;
      const tenantId = String(id);
      await trx
        .insertInto('tenants')
        .values({ id: tenantId, name: String(name), created_at: at() })
        .onConflict((oc) => oc.column('id').doUpdateSet({ name: String(name), created_at: at() }))
        .execute();
      await trx
        .insertInto('tenant_policies')
        .values({ tenant_id: tenantId, policy: JSON.stringify(stripNulls(policy)) })
        .onConflict((oc) => oc.column('tenant_id').doUpdateSet({ policy: JSON.stringify(stripNulls(policy)) }))
        .execute();
      for (const app of listSection(apps)) {
        const limits = isJsonObject(app.limits) ? app.limits : {};
        await trx
          .insertInto('apps')
          .values({ id: String(app.id), tenant_id: tenantId, name: String(app.name), limits: JSON.stringify(limits), created_at: at() })
          .onConflict((oc) => oc.column('id').doUpdateSet({ tenant_id: tenantId, name: String(app.name), limits: JSON.stringify(limits), created_at: at() }))
          .execute();
      }
    }
    const defaults = isJsonObject(raw.defaults) ? raw.defaults : {};
    await trx.insertInto('platform_defaults').values({ spec: JSON.stringify(defaults) }).onConflict((oc) => oc.column('id').doUpdateSet({ spec: JSON.stringify(defaults) })).execute();

    const config = await composeConfig(trx);
    validateComposed(config);
    const issuedAt = now();
    const version = await insertSnapshot(trx, config, SEED_ACTOR.id, issuedAt);
    await writeAudit(trx, { actor: SEED_ACTOR, action: 'config.seed', entityType: 'config', entityId: path.basename(filePath) }, null, config, version, issuedAt);
    return { seeded: true, version, revisions: revisions.length, aliases: aliases.length, tenants: tenants.length };
  });
}

