import type { Router } from 'express';
import { type Kysely, sql } from 'kysely';
import { WeirError } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { notFound } from '../admin-error';
import type { CommittedChange, ControlPlane } from '../control-plane';
import { assertCanaryGate, type GatedArm } from '../eval/canary-gate';
import { type CanaryRollbackRequest, targetsAfterRollback } from '../eval/canary-guard';
import { targetsOfAliasSpec } from '../eval/model-catalog';
import { aliasCreateBody, aliasPutBody, defaultsBody, deprecationBody, emptyBody, parseBody, poolCreateBody, poolPutBody, revisionCreateBody } from '../bodies';
import { isJsonObject, type JsonObject } from '../config-shapes';
import { aliasView, poolView, revisionView } from '../views';
import { actorOf, handle, type RouteContext, withVersion } from './context';

async function requireRevision(db: Kysely<WeirSchema>, id: string) {
  const r = await db.selectFrom('model_revisions').selectAll().where('id', '=', id).executeTakeFirst();
  if (!r) throw notFound('revision', id, 'list revisions with GET /admin/v1/revisions');
  return r;
}

async function requireAlias(db: Kysely<WeirSchema>, name: string) {
  const a = await db.selectFrom('model_aliases').selectAll().where('id', '=', name).executeTakeFirst();
  if (!a) throw notFound('alias', name, 'list aliases with GET /admin/v1/aliases');
  return a;
}

async function requirePool(db: Kysely<WeirSchema>, id: string) {
  const p = await db.selectFrom('pools').selectAll().where('id', '=', id).executeTakeFirst();
  if (!p) throw notFound('pool', id, 'list pools with GET /admin/v1/pools');
  return p;
}

/** An alias's arms: `targets` or the `revision` shorthand (whichever the spec has). */
function armsOf(spec: JsonObject): JsonObject {
  return { ...(spec.targets !== undefined ? { targets: spec.targets } : {}), ...(spec.revision !== undefined ? { revision: spec.revision } : {}) };
}

/** The audit action of the canary guard's rollbacks ({@link rollbackCanaryArm}). */
export const AUTO_ROLLBACK_ACTION = 'alias.auto_rollback';

/**
 * The spec an alias rollback restores: walking the alias's audit entries newest first, each
 * rollback cancels the newest update not yet cancelled; the first update left is undone (its
 * `before`). So repeated rollbacks step further back, and a rollback after a new update undoes
 * that update. An automatic canary rollback is a barrier: undoing it would restore a canary
 * the guard found regressing, without the canary gate (`blocked: 'auto_rollback'`).
 */
async function previousAliasSpec(db: Kysely<WeirSchema>, name: string): Promise<{ spec?: JsonObject; blocked?: 'auto_rollback' }> {
  const entries = await db.selectFrom('audit_log').select(['action', 'before']).where('entity_type', '=', 'alias').where('entity_id', '=', name).orderBy('id', 'desc').execute();
  let cancelled = 0;
  for (const e of entries) {
    if (e.action === 'alias.rollback') cancelled++;
    else if (e.action === 'alias.update') {
      if (cancelled > 0) cancelled--;
      else return { spec: isJsonObject(e.before) && isJsonObject(e.before.spec) ? e.before.spec : undefined };
    } else if (e.action === AUTO_ROLLBACK_ACTION) return { blocked: 'auto_rollback' };
    else return {}; // create or delete: nothing earlier belongs to this alias
  }
  return {};
}

/**
 * Checks the canary gate for an alias spec about to be committed inside `trx` (see
 * `assertCanaryGate`): `currentSpec` undefined for an alias being created, which the gate then
 * judges against the arms a deleted alias of the same name last had (none for a new name).
 * @returns the arms it let through (for the audit entry), empty when no canary's share grows.
 * @throws WeirError `conflict` (409) naming the canary revision without a passing eval.
 */
async function gateAliasChange(trx: Kysely<WeirSchema>, alias: string, newSpec: JsonObject, currentSpec: JsonObject | undefined): Promise<GatedArm[]> {
  return assertCanaryGate({ db: trx, alias, newTargets: targetsOfAliasSpec(newSpec), ...(currentSpec ? { currentTargets: targetsOfAliasSpec(currentSpec) } : {}) });
}

/**
 * The canary guard's rollback port over the control plane: sets `request.revision`'s weight on
 * `request.alias` to 0 (every other arm and field unchanged, `targetsAfterRollback`) as one
 * change by `request.actor` with action `alias.auto_rollback`: validated, audited (`after`
 * carries `auto_rollback: {revision, stable_revision, trigger, reason, canary, stable}`) and
 * published as a new snapshot like any change. Not gated: lowering a canary never is.
 * @returns the alias view after the change and the snapshot version.
 * @throws WeirError `not_found` when the alias is gone; `conflict` when the revision is no
 *   longer a positive-weight arm of it (already rolled back or removed: nothing to do).
 */
export async function rollbackCanaryArm(cp: ControlPlane, request: CanaryRollbackRequest): Promise<CommittedChange<ReturnType<typeof aliasView>>> {
  const name = request.alias;
  return cp.change({ actor: { id: request.actor.id, label: request.actor.label }, action: AUTO_ROLLBACK_ACTION, entityType: 'alias', entityId: name }, async (trx) => {
    const current = await requireAlias(trx, name);
    const targets = targetsOfAliasSpec(current.spec);
    if (!Array.isArray(current.spec.targets) || !targets.some((t) => t.revision === request.revision && t.weight > 0)) {
      throw new WeirError('conflict', `Revision ${JSON.stringify(request.revision)} is no longer a canary arm with a positive weight on alias ${JSON.stringify(name)}; nothing to roll back.`);
    }
    const spec = { ...current.spec, targets: targetsAfterRollback(targets, request.revision) };
    const before = aliasView(current);
    const row = await trx.updateTable('model_aliases').set({ spec: JSON.stringify(spec), updated_at: new Date() }).where('id', '=', name).returningAll().executeTakeFirstOrThrow();
    const after = aliasView(row);
    const detail = { revision: request.revision, stable_revision: request.stable_revision, trigger: request.trigger, reason: request.reason, canary: request.canary, stable: request.stable };
    return { before, after: { ...after, auto_rollback: detail }, result: after };
  });
}

/**
 * The models (read-only): each `model` named by revisions, with its revisions (oldest first,
 * deprecation included) and the aliases whose arms or fallbacks reach them. A model is not an
 * entity of its own: it is created and changed through its revisions, which are immutable (a
 * new price or engine is a new revision).
 */
async function modelViews(db: Kysely<WeirSchema>) {
  const revisions = await db.selectFrom('model_revisions').selectAll().orderBy('created_at').orderBy('id').execute();
  const aliases = await db.selectFrom('model_aliases').select(['id', 'spec']).orderBy('created_at').orderBy('id').execute();
  const byModel = new Map<string, { id: string; revisions: { id: string; deprecation: unknown }[]; aliases: string[] }>();
  for (const r of revisions) {
    const model = typeof r.spec.model === 'string' ? r.spec.model : r.id;
    const entry = byModel.get(model) ?? { id: model, revisions: [], aliases: [] };
    entry.revisions.push({ id: r.id, deprecation: r.deprecation });
    byModel.set(model, entry);
  }
  for (const entry of byModel.values()) {
    const ids = new Set(entry.revisions.map((r) => r.id));
    entry.aliases = aliases
      .filter((a) => targetsOfAliasSpec(a.spec).some((t) => ids.has(t.revision)) || (Array.isArray(a.spec.fallbacks) && a.spec.fallbacks.some((f) => ids.has(String(f)))))
      .map((a) => a.id);
  }
  return [...byModel.values()];
}

/** Models (read-only), revisions (immutable but for deprecation), aliases (arms, weights, rollback), pools and defaults. */
export function registerModelRoutes(router: Router, { cp }: RouteContext): void {
  const db = cp.db;

  // ---- models (a view over revisions)
  router.get('/models', handle(async () => ({ data: await modelViews(db) })));
  router.get(
    '/models/:model',
    handle(async (req) => {
      const model = (await modelViews(db)).find((m) => m.id === String(req.params.model));
      if (!model) throw notFound('model', String(req.params.model), 'no revision names it: create one with POST /admin/v1/revisions');
      return model;
    }),
  );

  // ---- revisions
  router.get('/revisions', handle(async () => ({ data: (await db.selectFrom('model_revisions').selectAll().orderBy('created_at').orderBy('id').execute()).map(revisionView) })));
  router.get('/revisions/:revisionId', handle(async (req) => revisionView(await requireRevision(db, String(req.params.revisionId)))));

  router.post(
    '/revisions',
    handle(async (req, res) => {
      const { deprecation, ...spec } = parseBody(revisionCreateBody, req.body) as JsonObject & { id: string };
      const dep = deprecation === undefined || deprecation === null ? null : parseBody(deprecationBody, deprecation);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'revision.create', entityType: 'revision', entityId: spec.id }, async (trx) => {
        if (await trx.selectFrom('model_revisions').select('id').where('id', '=', spec.id).executeTakeFirst()) {
          throw new WeirError('conflict', `Revision ${JSON.stringify(spec.id)} already exists, and revisions are immutable; create a new revision with another id (e.g. ${spec.id}-2).`, { param: 'id' });
        }
        if (dep) await checkReplacement(trx, spec.id, dep.replacement);
        const row = await trx
          .insertInto('model_revisions')
          .values({ id: spec.id, spec: JSON.stringify(spec), deprecation: dep ? JSON.stringify(dep) : null })
          .returningAll()
          .executeTakeFirstOrThrow();
        const after = revisionView(row);
        return { before: null, after, result: after };
      });
      withVersion(res, version);
      return result;
    }, 201),
  );

  router.patch(
    '/revisions/:revisionId',
    handle(async (req, res) => {
      const id = String(req.params.revisionId);
      const body: unknown = req.body ?? {};
      if (!isJsonObject(body)) throw new WeirError('invalid_request', 'The body must be a JSON object such as {"deprecation": {"retires_on": "2030-01-31", "replacement": "<revision id>"}}.');
      const others = Object.keys(body).filter((k) => k !== 'deprecation');
      if (others.length > 0) {
        throw new WeirError('conflict', `revisions are immutable; create a new revision (only "deprecation" may change here; got ${others.map((k) => JSON.stringify(k)).join(', ')}).`, { param: others[0] });
      }
      if (!('deprecation' in body)) throw new WeirError('invalid_request', 'Give "deprecation": {retires_on, replacement, announced_on?}, or null to withdraw it.', { param: 'deprecation' });
      const dep = body.deprecation === null ? null : parseBody(deprecationBody, body.deprecation);
      const { result, version } = await cp.change({ actor: actorOf(req), action: dep ? 'revision.deprecate' : 'revision.undeprecate', entityType: 'revision', entityId: id }, async (trx) => {
        const before = revisionView(await requireRevision(trx, id));
        if (dep) await checkReplacement(trx, id, dep.replacement);
        const row = await trx
          .updateTable('model_revisions')
          .set({ deprecation: dep ? JSON.stringify(dep) : null, updated_at: new Date() })
          .where('id', '=', id)
          .returningAll()
          .executeTakeFirstOrThrow();
        const after = revisionView(row);
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  // ---- aliases
  router.get('/aliases', handle(async () => ({ data: (await db.selectFrom('model_aliases').selectAll().orderBy('created_at').orderBy('id').execute()).map(aliasView) })));
  router.get('/aliases/:alias', handle(async (req) => aliasView(await requireAlias(db, String(req.params.alias)))));

  router.post(
    '/aliases',
    handle(async (req, res) => {
      const { name, ...spec } = parseBody(aliasCreateBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'alias.create', entityType: 'alias', entityId: name }, async (trx) => {
        if (await trx.selectFrom('model_aliases').select('id').where('id', '=', name).executeTakeFirst()) {
          throw new WeirError('conflict', `Alias ${JSON.stringify(name)} already exists; change its arms with PUT /admin/v1/aliases/${name}.`, { param: 'name' });
        }
        const gated = await gateAliasChange(trx, name, spec, undefined);
        const row = await trx.insertInto('model_aliases').values({ id: name, spec: JSON.stringify(spec) }).returningAll().executeTakeFirstOrThrow();
        const after = aliasView(row);
        return { before: null, after: gated.length > 0 ? { ...after, canary_gate: gated } : after, result: after };
      });
      withVersion(res, version);
      return result;
    }, 201),
  );

  router.put(
    '/aliases/:alias',
    handle(async (req, res) => {
      const name = String(req.params.alias);
      const { name: bodyName, ...spec } = parseBody(aliasPutBody, req.body);
      if (bodyName !== undefined && bodyName !== name) throw new WeirError('invalid_request', `The body names alias ${JSON.stringify(bodyName)} but the path ${JSON.stringify(name)}; aliases cannot be renamed (create a new one).`, { param: 'name' });
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'alias.update', entityType: 'alias', entityId: name }, async (trx) => {
        const current = await requireAlias(trx, name);
        const gated = await gateAliasChange(trx, name, spec, current.spec);
        const before = aliasView(current);
        const row = await trx.updateTable('model_aliases').set({ spec: JSON.stringify(spec), updated_at: new Date() }).where('id', '=', name).returningAll().executeTakeFirstOrThrow();
        const after = aliasView(row);
        return { before, after: gated.length > 0 ? { ...after, canary_gate: gated } : after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.post(
    '/aliases/:alias/rollback',
    handle(async (req, res) => {
      const name = String(req.params.alias);
      parseBody(emptyBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'alias.rollback', entityType: 'alias', entityId: name }, async (trx) => {
        const current = await requireAlias(trx, name);
        const { spec: previous, blocked } = await previousAliasSpec(trx, name);
        if (blocked === 'auto_rollback') {
          throw new WeirError(
            'conflict',
            `Alias ${JSON.stringify(name)} was last changed by an automatic canary rollback; undoing it would restore a regressing canary. Set its arms with PUT /admin/v1/aliases/${name} (raising a canary needs a passing eval).`,
          );
        }
        if (!previous) throw new WeirError('conflict', `Alias ${JSON.stringify(name)} has no earlier version to roll back to (its audit log holds no update before the current arms).`);
        const { targets: _t, revision: _r, ...rest } = current.spec;
        const spec = { ...rest, ...armsOf(previous) };
        const before = aliasView(current);
        const row = await trx.updateTable('model_aliases').set({ spec: JSON.stringify(spec), updated_at: new Date() }).where('id', '=', name).returningAll().executeTakeFirstOrThrow();
        const after = aliasView(row);
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/aliases/:alias',
    handle(async (req, res) => {
      const name = String(req.params.alias);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'alias.delete', entityType: 'alias', entityId: name }, async (trx) => {
        const before = aliasView(await requireAlias(trx, name));
        await trx.deleteFrom('model_aliases').where('id', '=', name).execute();
        return { before, after: null, result: { name, deleted: true } };
      });
      withVersion(res, version);
      return result;
    }),
  );

  // ---- pools
  router.get('/pools', handle(async () => ({ data: (await db.selectFrom('pools').selectAll().orderBy('created_at').orderBy('id').execute()).map(poolView) })));
  router.get('/pools/:poolId', handle(async (req) => poolView(await requirePool(db, String(req.params.poolId)))));

  router.post(
    '/pools',
    handle(async (req, res) => {
      const { id, ...spec } = parseBody(poolCreateBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'pool.create', entityType: 'pool', entityId: id }, async (trx) => {
        if (await trx.selectFrom('pools').select('id').where('id', '=', id).executeTakeFirst()) throw new WeirError('conflict', `Pool ${JSON.stringify(id)} already exists; change it with PUT /admin/v1/pools/${id}.`, { param: 'id' });
        const after = poolView(await trx.insertInto('pools').values({ id, spec: JSON.stringify(spec) }).returningAll().executeTakeFirstOrThrow());
        return { before: null, after, result: after };
      });
      withVersion(res, version);
      return result;
    }, 201),
  );

  router.put(
    '/pools/:poolId',
    handle(async (req, res) => {
      const id = String(req.params.poolId);
      const spec = parseBody(poolPutBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'pool.update', entityType: 'pool', entityId: id }, async (trx) => {
        const before = poolView(await requirePool(trx, id));
        const after = poolView(await trx.updateTable('pools').set({ spec: JSON.stringify(spec), updated_at: new Date() }).where('id', '=', id).returningAll().executeTakeFirstOrThrow());
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/pools/:poolId',
    handle(async (req, res) => {
      const id = String(req.params.poolId);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'pool.delete', entityType: 'pool', entityId: id }, async (trx) => {
        const before = poolView(await requirePool(trx, id));
        const users = await trx.selectFrom('tenant_policies').select('tenant_id').where(sql<string>`policy->>'dedicated_pool'`, '=', id).execute();
        if (users.length > 0) {
          throw new WeirError('conflict', `Pool ${JSON.stringify(id)} is the dedicated pool of ${users.map((u) => JSON.stringify(u.tenant_id)).join(', ')}; change their policies first.`);
        }
        await trx.deleteFrom('pools').where('id', '=', id).execute();
        return { before, after: null, result: { id, deleted: true } };
      });
      withVersion(res, version);
      return result;
    }),
  );

  // ---- defaults
  const loadDefaults = async (d: Kysely<WeirSchema>): Promise<JsonObject> => (await d.selectFrom('platform_defaults').select('spec').executeTakeFirst())?.spec ?? {};
  router.get('/defaults', handle(async () => loadDefaults(db)));

  const changeDefaults = (action: string, next: (before: JsonObject, body: JsonObject) => JsonObject) =>
    handle(async (req, res) => {
      const body = parseBody(defaultsBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action, entityType: 'defaults', entityId: 'defaults' }, async (trx) => {
        const before = await loadDefaults(trx);
        const after = next(before, body);
        const json = JSON.stringify(after);
        await trx.insertInto('platform_defaults').values({ spec: json }).onConflict((oc) => oc.column('id').doUpdateSet({ spec: json, updated_at: new Date() })).execute();
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    });
  router.put('/defaults', changeDefaults('defaults.replace', (_before, body) => body));
  router.patch(
    '/defaults',
    changeDefaults('defaults.update', (before, body) => {
      const out: JsonObject = { ...before };
      for (const [k, v] of Object.entries(body)) {
        if (v === null) delete out[k];
        else out[k] = v;
      }
      return out;
    }),
  );
}

/** A deprecation's replacement must be another existing revision. */
async function checkReplacement(db: Kysely<WeirSchema>, id: string, replacement: string): Promise<void> {
  if (replacement === id) throw new WeirError('invalid_request', 'deprecation.replacement must be another revision, not the deprecated one itself.', { param: 'deprecation.replacement' });
  if (!(await db.selectFrom('model_revisions').select('id').where('id', '=', replacement).executeTakeFirst())) {
    throw new WeirError('invalid_request', `deprecation.replacement: unknown revision ${JSON.stringify(replacement)}; create it first (POST /admin/v1/revisions) or name an existing one.`, { param: 'deprecation.replacement' });
  }
}
