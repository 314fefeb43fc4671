import { readFileSync } from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { Transaction } from 'kysely';
import { isConfigError, loadConfigFile, parseConfig } from '@weir/config';
import { WeirError } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { parse as parseYaml } from 'yaml';
import { InvalidChangeError } from './admin-error';
import { composeConfig } from './compose-config';
import { absoluteModelPath, isJsonObject, listSection, stripNulls, type JsonObject } from './config-shapes';
import type { Actor, ControlPlane, RevocationRequest } from './control-plane';
import { policyRevocations, retireTenant } from './routes/tenants';

/** The actor of a configuration-file import (the all-in-one's watched `WEIR_CONFIG`). */
export const CONFIG_FILE_ACTOR: Actor = { id: 'config-file', label: 'configuration file (WEIR_CONFIG)' };

/** What {@link importConfig} did. */
export type ImportResult =
  /** One change committed: `version` is its snapshot. */
  | { imported: true; version: number }
  /** The store already held exactly this configuration: nothing was written (no snapshot, no audit entry). */
  | { imported: false; reason: 'unchanged' };

/**
 * What an import takes from the configuration:
 * - `all`: every section replaces the stored one (see {@link importConfig});
 * - `placement`: only where revisions are served — the `replicas` of each revision that both
 *   the store and the configuration list; everything else (revisions the store lacks or the
 *   file omits, aliases, tenants, defaults) stays as stored. This is what a deployment that
 *   starts engines on new addresses each time (the split launcher) needs on an existing store.
 */
export type ImportScope = 'all' | 'placement';

/** Options of {@link importConfig}. */
export interface ImportConfigOptions {
  /** Names the import in the audit log (`entity_id`), e.g. the file's base name. Default `config`. */
  source?: string;
  /** What is taken from the configuration. Default `all`. */
  scope?: ImportScope;
}

/** Thrown inside the transaction to roll back an import that changes nothing. */
class Unchanged extends Error {}

/**
 * Replaces the store's revisions, aliases, tenants (with their apps and policies) and defaults
 * with those of `config` — a configuration-file object (snake_case, what `parseConfig` accepts)
 * — as ONE change through the control plane's change path: one transaction, the composed result
 * validated with `parseConfig`, one audit entry (`config.import` on `config/<source>`, before and
 * after being the whole composed configuration), the next snapshot version, then publication.
 *
 * What "replace" means per section:
 * - revisions: new ones are created; ones the file no longer lists are deleted; a listed one
 *   must equal the stored spec (revisions are immutable: what a revision IS — model, engine,
 *   limits, prices — never changes under its id) but for its `deprecation` and its `replicas`
 *   (where it is served: deployment placement, not identity; e.g. engines restarted on new
 *   ports), which are updated;
 * - aliases and defaults: set to the file's; aliases it no longer lists are deleted;
 * - tenants: name and policy set to the file's, apps upserted and the ones it no longer lists
 *   deleted (their active keys revoked on the fast path); tenants it no longer lists are deleted
 *   with their apps and keys (a `tenant` revocation each). A policy that newly sets `disabled`
 *   or flips `kill_switch` publishes the same fast-path revocation as the admin API.
 * - redaction_profiles: set to the file's; profiles it no longer lists are deleted.
 * Pools (a store-only registry) and admin tokens are not touched. New entities keep the file's
 * order; existing ones keep their place. With `options.scope` `placement` only the replicas of
 * revisions both list are taken (action `config.placement` in the audit log); see {@link ImportScope}.
 *
 * @returns `{imported: false, reason: 'unchanged'}` when the result would equal the stored
 *   configuration (a file saved without changes), without writing anything.
 * @throws InvalidChangeError (`invalid_request`, code `invalid_config` on HTTP) when `config`
 *   or the composed result is invalid; WeirError `conflict` when a listed revision differs from
 *   the stored one with the same id in more than its deprecation and replicas, or an app id
 *   belongs to another tenant. Nothing is committed when it throws.
 */
export async function importConfig(controlPlane: ControlPlane, config: JsonObject, actor: Actor, options: ImportConfigOptions = {}): Promise<ImportResult> {
  try {
    parseConfig(JSON.stringify(config), options.source ?? 'imported configuration', { format: 'json' });
  } catch (err) {
    if (isConfigError(err)) throw new InvalidChangeError(err.problems, { cause: err });
    throw err;
  }
  try {
    const placementOnly = options.scope === 'placement';
    const action = placementOnly ? 'config.placement' : 'config.import';
    const { version } = await controlPlane.change({ actor, action, entityType: 'config', entityId: options.source ?? 'config' }, async (trx) => {
      const before = await composeConfig(trx);
      const revocations = placementOnly ? await replacePlacement(trx, config) : await replaceConfig(trx, config);
      const after = await composeConfig(trx);
      if (revocations.length === 0 && isDeepStrictEqual(before, after)) throw new Unchanged();
      return { before, after, result: undefined, revocations };
    });
    return { imported: true, version: version as number };
  } catch (err) {
    if (err instanceof Unchanged) return { imported: false, reason: 'unchanged' };
    throw err;
  }
}

/**
 * Reads a configuration file (YAML, or JSON) as the configuration-file object
 * {@link importConfig} takes, validated with `loadConfigFile`; a relative `engine.model_path`
 * is made absolute against the file's directory (a snapshot has no directory of its own), as
 * `seedFromConfigFile` does.
 * @throws ConfigError when the file cannot be read or is invalid.
 */
export function readConfigFileObject(filePath: string): JsonObject {
  loadConfigFile(filePath);
  const raw = parseYaml(readFileSync(filePath, 'utf8')) as unknown;
  const object = isJsonObject(raw) ? raw : {};
  const baseDir = path.dirname(path.resolve(filePath));
  return { ...object, revisions: listSection(object.revisions).map((r) => absoluteModelPath(r, baseDir)) };
}

/**
 * {@link readConfigFileObject} then {@link importConfig} with `source` the file's base name
 * and `options.scope` (default `all`).
 * @throws as both do.
 */
export async function importConfigFile(controlPlane: ControlPlane, filePath: string, actor: Actor = CONFIG_FILE_ACTOR, options: { scope?: ImportScope } = {}): Promise<ImportResult> {
  return importConfig(controlPlane, readConfigFileObject(filePath), actor, { source: path.basename(filePath), ...options });
}

/** A revision spec without its placement (`replicas`): what must never change under its id. */
function identityOf(spec: JsonObject): JsonObject {
  const { replicas: _placement, ...identity } = stripNulls(spec);
  return identity;
}

/** Writes `spec` (deprecation excluded) over the stored revision `id` inside `trx`. */
async function updateRevisionSpec(trx: Transaction<WeirSchema>, id: string, spec: JsonObject): Promise<void> {
  await trx.updateTable('model_revisions').set({ spec: JSON.stringify(spec), updated_at: new Date() }).where('id', '=', id).execute();
}

/** Takes the `replicas` of every revision both `config` and the store list; nothing else changes. */
async function replacePlacement(trx: Transaction<WeirSchema>, config: JsonObject): Promise<RevocationRequest[]> {
  const stored = new Map((await trx.selectFrom('model_revisions').select(['id', 'spec']).execute()).map((r) => [r.id, stripNulls(r.spec)]));
  for (const r of listSection(config.revisions)) {
    const id = String(r.id);
    const spec = stored.get(id);
    if (!spec) continue;
    const { replicas: _old, ...rest } = spec;
    const next = r.replicas === undefined || r.replicas === null ? rest : { ...rest, replicas: r.replicas };
    if (!isDeepStrictEqual(spec, next)) await updateRevisionSpec(trx, id, next);
  }
  return [];
}

/** Writes `config`'s sections over the stored ones inside `trx`; returns the fast-path revocations implied. */
async function replaceConfig(trx: Transaction<WeirSchema>, config: JsonObject): Promise<RevocationRequest[]> {
  const revocations: RevocationRequest[] = [];
  const base = Date.now();
  // New entities get creation times one millisecond apart after every existing one: the
  // composer orders by creation time, so they keep the file's order.
  let tick = 0;
  const created = () => new Date(base + tick++);

  // ---- revisions
  const storedRevisions = new Map((await trx.selectFrom('model_revisions').select(['id', 'spec', 'deprecation']).execute()).map((r) => [r.id, r]));
  const fileRevisions = listSection(config.revisions);
  const revisionIds = new Set(fileRevisions.map((r) => String(r.id)));
  for (const r of fileRevisions) {
    const id = String(r.id);
    const { deprecation: rawDeprecation, ...spec } = r;
    const deprecation = isJsonObject(rawDeprecation) ? rawDeprecation : null;
    const stored = storedRevisions.get(id);
    if (!stored) {
      const at = created();
      await trx
        .insertInto('model_revisions')
        .values({ id, spec: JSON.stringify(spec), deprecation: deprecation ? JSON.stringify(deprecation) : null, created_at: at, updated_at: at })
        .execute();
      continue;
    }
    if (!isDeepStrictEqual(stripNulls(stored.spec), stripNulls(spec))) {
      if (!isDeepStrictEqual(identityOf(stored.spec), identityOf(spec))) {
        throw new WeirError(
          'conflict',
          `Revision ${JSON.stringify(id)} differs from the stored revision with that id, and revisions are immutable (only "deprecation" and "replicas" may change); give the changed revision a new id (e.g. ${id}-2) and move the alias to it.`,
          { param: `revisions.${id}` },
        );
      }
      // Only the placement moved (e.g. engines restarted on new ports): the revision is the same.
      await updateRevisionSpec(trx, id, spec);
    }
    if (!isDeepStrictEqual(stored.deprecation ?? null, deprecation)) {
      await trx.updateTable('model_revisions').set({ deprecation: deprecation ? JSON.stringify(deprecation) : null, updated_at: new Date() }).where('id', '=', id).execute();
    }
  }
  const goneRevisions = [...storedRevisions.keys()].filter((id) => !revisionIds.has(id));
  if (goneRevisions.length > 0) await trx.deleteFrom('model_revisions').where('id', 'in', goneRevisions).execute();

  // ---- aliases
  const storedAliases = new Map((await trx.selectFrom('model_aliases').select(['id', 'spec']).execute()).map((a) => [a.id, a.spec]));
  const fileAliases = listSection(config.aliases);
  const aliasNames = new Set(fileAliases.map((a) => String(a.name)));
  for (const a of fileAliases) {
    const { name, ...spec } = a;
    const id = String(name);
    const stored = storedAliases.get(id);
    if (!stored) await trx.insertInto('model_aliases').values({ id, spec: JSON.stringify(spec), created_at: created(), updated_at: new Date() }).execute();
    else if (!isDeepStrictEqual(stored, spec)) await trx.updateTable('model_aliases').set({ spec: JSON.stringify(spec), updated_at: new Date() }).where('id', '=', id).execute();
  }
  const goneAliases = [...storedAliases.keys()].filter((id) => !aliasNames.has(id));
  if (goneAliases.length > 0) await trx.deleteFrom('model_aliases').where('id', 'in', goneAliases).execute();

  // ---- tenants: the ones the file no longer lists go first (their apps free their ids)
  const fileTenants = listSection(config.tenants);
  const tenantIds = new Set(fileTenants.map((t) => String(t.id)));
  const storedTenants = await trx.selectFrom('tenants').leftJoin('tenant_policies', 'tenant_policies.tenant_id', 'tenants.id').select(['tenants.id', 'tenant_policies.policy']).execute();
  const goneTenants = storedTenants.map((t) => t.id).filter((id) => !tenantIds.has(id));
  for (const id of goneTenants) revocations.push(...(await retireTenant(trx, id)));
  const policies = new Map(storedTenants.map((t) => [t.id, t.policy ?? {}]));
  for (const t of fileTenants) {
    // `uid` is the store's to give (a file copied from a snapshot may carry one): never policy.
    const { id: rawId, name, apps, uid: _uid, ...rawPolicy } = t;
    const tenantId = String(rawId);
    const policy = stripNulls(rawPolicy);
    const before = policies.get(tenantId);
    if (before === undefined) {
      await trx.insertInto('tenants').values({ id: tenantId, name: String(name), created_at: created() }).execute();
    } else {
      await trx.updateTable('tenants').set({ name: String(name) }).where('id', '=', tenantId).execute();
    }
    if (before === undefined || !isDeepStrictEqual(before, policy)) {
      const json = JSON.stringify(policy);
      await trx
        .insertInto('tenant_policies')
        .values({ tenant_id: tenantId, policy: json, updated_at: new Date() })
        .onConflict((oc) => oc.column('tenant_id').doUpdateSet({ policy: json, updated_at: new Date() }))
        .execute();
    }
    revocations.push(...policyRevocations(tenantId, before ?? {}, policy));

    const fileApps = listSection(apps);
    const appIds = new Set(fileApps.map((a) => String(a.id)));
    const storedApps = appIds.size > 0 ? await trx.selectFrom('apps').select(['id', 'tenant_id']).where('id', 'in', [...appIds]).execute() : [];
    for (const owned of storedApps) {
      if (owned.tenant_id !== tenantId) {
        throw new WeirError('conflict', `App ${JSON.stringify(owned.id)} belongs to tenant ${JSON.stringify(owned.tenant_id)}; an app never moves between tenants (its keys would change owner): give it another id.`, {
          param: `tenants.${tenantId}.apps.${owned.id}`,
        });
      }
    }
    const existingApps = new Set(storedApps.map((a) => a.id));
    for (const app of fileApps) {
      const appId = String(app.id);
      const limits = JSON.stringify(isJsonObject(app.limits) ? app.limits : {});
      if (existingApps.has(appId)) await trx.updateTable('apps').set({ name: String(app.name), limits }).where('id', '=', appId).execute();
      else await trx.insertInto('apps').values({ id: appId, tenant_id: tenantId, name: String(app.name), limits, created_at: created() }).execute();
    }
    const goneApps = (await trx.selectFrom('apps').select('id').where('tenant_id', '=', tenantId).execute()).map((a) => a.id).filter((id) => !appIds.has(id));
    if (goneApps.length > 0) {
      const keys = await trx.selectFrom('api_keys').select(['id', 'sha256']).where('app_id', 'in', goneApps).where('revoked_at', 'is', null).execute();
      for (const k of keys) revocations.push({ kind: 'api_key', tenant_id: tenantId, api_key_id: k.id, api_key_sha256: k.sha256 });
      await trx.deleteFrom('apps').where('id', 'in', goneApps).execute();
    }
  }

  // ---- defaults
  const defaults = JSON.stringify(isJsonObject(config.defaults) ? stripNulls(config.defaults) : {});
  await trx.insertInto('platform_defaults').values({ spec: defaults }).onConflict((oc) => oc.column('id').doUpdateSet({ spec: defaults, updated_at: new Date() })).execute();

  // ---- redaction profiles: set to the file's (kept in place when unchanged, so their order holds)
  const fileProfiles = isJsonObject(config.redaction_profiles) ? config.redaction_profiles : {};
  const storedProfiles = new Map((await trx.selectFrom('redaction_profiles').select(['id', 'spec']).execute()).map((p) => [p.id, p.spec]));
  for (const [name, spec] of Object.entries(fileProfiles)) {
    const json = JSON.stringify(isJsonObject(spec) ? stripNulls(spec) : {});
    if (!storedProfiles.has(name)) await trx.insertInto('redaction_profiles').values({ id: name, spec: json, created_at: created() }).execute();
    else if (JSON.stringify(storedProfiles.get(name)) !== json) await trx.updateTable('redaction_profiles').set({ spec: json, updated_at: new Date() }).where('id', '=', name).execute();
  }
  const goneProfiles = [...storedProfiles.keys()].filter((name) => !Object.hasOwn(fileProfiles, name));
  if (goneProfiles.length > 0) await trx.deleteFrom('redaction_profiles').where('id', 'in', goneProfiles).execute();
  return revocations;
}
