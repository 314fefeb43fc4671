import type { Router } from 'express';
import type { Kysely } from 'kysely';
import { WeirError, mintApiKey, newId } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { notFound } from '../admin-error';
import { apiKeyCreateBody, appCreateBody, appPatchBody, killSwitchBody, parseBody, policyBody, policyPatchBody, tenantCreateBody, tenantPatchBody } from '../bodies';
import type { JsonObject } from '../config-shapes';
import type { RevocationRequest } from '../control-plane';
import { assertPinGate } from '../eval/pin-gate';
import { apiKeyView, appView, tenantView } from '../views';
import { actorOf, handle, type RouteContext, withVersion } from './context';
import { gatedRoutesOf } from './use-case-pins';

/** Loads a tenant with its apps and policy, or undefined. */
async function loadTenant(db: Kysely<WeirSchema>, id: string) {
  const t = await db.selectFrom('tenants').select(['id', 'uid', 'name', 'created_at']).where('id', '=', id).executeTakeFirst();
  if (!t) return undefined;
  const apps = await db.selectFrom('apps').select(['id', 'uid', 'tenant_id', 'name', 'limits', 'created_at']).where('tenant_id', '=', id).orderBy('created_at').orderBy('id').execute();
  return tenantView(t, apps.map(appView), await loadPolicy(db, id));
}

async function loadPolicy(db: Kysely<WeirSchema>, tenantId: string): Promise<JsonObject> {
  const row = await db.selectFrom('tenant_policies').select(['policy']).where('tenant_id', '=', tenantId).executeTakeFirst();
  return row?.policy ?? {};
}

/** The tenant `id` with its apps and policy. @throws WeirError `not_found` naming how to list tenants. */
export async function requireTenant(db: Kysely<WeirSchema>, id: string) {
  const t = await loadTenant(db, id);
  if (!t) throw notFound('tenant', id, 'list tenants with GET /admin/v1/tenants');
  return t;
}

async function requireApp(db: Kysely<WeirSchema>, tenantId: string, appId: string) {
  await requireTenant(db, tenantId);
  const a = await db.selectFrom('apps').select(['id', 'uid', 'tenant_id', 'name', 'limits', 'created_at']).where('id', '=', appId).where('tenant_id', '=', tenantId).executeTakeFirst();
  if (!a) throw notFound('app', appId, `list tenant ${JSON.stringify(tenantId)}'s apps with GET /admin/v1/tenants/${tenantId}/apps`);
  return appView(a);
}

/** Writes a tenant's whole policy (insert or replace). */
export async function savePolicy(db: Kysely<WeirSchema>, tenantId: string, policy: JsonObject): Promise<void> {
  const json = JSON.stringify(policy);
  await db
    .insertInto('tenant_policies')
    .values({ tenant_id: tenantId, policy: json, updated_at: new Date() })
    .onConflict((oc) => oc.column('tenant_id').doUpdateSet({ policy: json, updated_at: new Date() }))
    .execute();
}

/** The fast-path revocations a policy change implies: newly disabled, or a flipped kill switch. */
export function policyRevocations(tenantId: string, before: JsonObject, after: JsonObject): RevocationRequest[] {
  const out: RevocationRequest[] = [];
  if (after.disabled === true && before.disabled !== true) out.push({ kind: 'tenant', tenant_id: tenantId });
  if ((after.kill_switch === true) !== (before.kill_switch === true)) out.push({ kind: 'kill_switch', tenant_id: tenantId, enabled: after.kill_switch === true });
  return out;
}

/**
 * Deletes a tenant inside a change's transaction and fences what it leaves (issue 14 §4): its
 * apps, keys and policy go (foreign keys cascade); its idempotency keys and their retained
 * results (filed under its internal id) are purged; every active key is revoked on the fast
 * path as well as the tenant, so a gateway's cached key cannot authenticate as the old tenant
 * once a same-id successor re-enables the id. Its ledger rows stay, under its retired internal
 * id. Returns the revocations to publish.
 */
export async function retireTenant(trx: Kysely<WeirSchema>, tenantId: string): Promise<RevocationRequest[]> {
  const row = await trx.selectFrom('tenants').select(['uid']).where('id', '=', tenantId).executeTakeFirst();
  if (!row) return [];
  const revocations: RevocationRequest[] = [{ kind: 'tenant', tenant_id: tenantId }, ...(await activeKeyRevocations(trx, { tenantId }))];
  await trx.deleteFrom('idempotency_keys').where('tenant_id', '=', row.uid).execute();
  await trx.deleteFrom('tenants').where('id', '=', tenantId).execute();
  return revocations;
}

const activeKeyRevocations = async (db: Kysely<WeirSchema>, where: { tenantId: string; appId?: string }): Promise<RevocationRequest[]> => {
  let q = db.selectFrom('api_keys').select(['id', 'sha256']).where('tenant_id', '=', where.tenantId).where('revoked_at', 'is', null);
  if (where.appId) q = q.where('app_id', '=', where.appId);
  return (await q.execute()).map((k) => ({ kind: 'api_key', tenant_id: where.tenantId, api_key_id: k.id, api_key_sha256: k.sha256 }));
};

/** Tenants, their apps, API keys, policies and kill switch. */
export function registerTenantRoutes(router: Router, { cp }: RouteContext): void {
  const db = cp.db;

  router.get(
    '/tenants',
    handle(async () => {
      const ids = await db.selectFrom('tenants').select(['id']).orderBy('created_at').orderBy('id').execute();
      const data = [];
      for (const { id } of ids) data.push(await loadTenant(db, id));
      return { data };
    }),
  );

  router.post(
    '/tenants',
    handle(async (req, res) => {
      const body = parseBody(tenantCreateBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'tenant.create', entityType: 'tenant', entityId: body.id }, async (trx) => {
        if (await trx.selectFrom('tenants').select('id').where('id', '=', body.id).executeTakeFirst()) {
          throw new WeirError('conflict', `Tenant ${JSON.stringify(body.id)} already exists; change it with PATCH /admin/v1/tenants/${body.id}.`, { param: 'id' });
        }
        const pinGate = await assertPinGate({ db: trx, beforeRoutes: undefined, afterRoutes: gatedRoutesOf(body.policy ?? {}) });
        await trx.insertInto('tenants').values({ id: body.id, name: body.name }).execute();
        await savePolicy(trx, body.id, body.policy ?? {});
        const after = await requireTenant(trx, body.id);
        return { before: null, after: pinGate.length > 0 ? { ...after, pin_gate: pinGate } : after, result: after, revocations: policyRevocations(body.id, {}, body.policy ?? {}) };
      });
      withVersion(res, version);
      return result;
    }, 201),
  );

  router.get('/tenants/:tenantId', handle(async (req) => requireTenant(db, String(req.params.tenantId))));

  router.patch(
    '/tenants/:tenantId',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const body = parseBody(tenantPatchBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'tenant.update', entityType: 'tenant', entityId: tenantId }, async (trx) => {
        const before = await requireTenant(trx, tenantId);
        if (body.name !== undefined) await trx.updateTable('tenants').set({ name: body.name }).where('id', '=', tenantId).execute();
        const after = await requireTenant(trx, tenantId);
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/tenants/:tenantId',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'tenant.delete', entityType: 'tenant', entityId: tenantId }, async (trx) => {
        const before = await requireTenant(trx, tenantId);
        const revocations = await retireTenant(trx, tenantId);
        return { before, after: null, result: { id: tenantId, deleted: true, internal_id: before.internal_id }, revocations };
      });
      withVersion(res, version);
      return result;
    }),
  );

  // ---- apps
  router.get(
    '/tenants/:tenantId/apps',
    handle(async (req) => ({ data: (await requireTenant(db, String(req.params.tenantId))).apps })),
  );

  router.post(
    '/tenants/:tenantId/apps',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const body = parseBody(appCreateBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'app.create', entityType: 'app', entityId: body.id }, async (trx) => {
        await requireTenant(trx, tenantId);
        const existing = await trx.selectFrom('apps').select(['tenant_id']).where('id', '=', body.id).executeTakeFirst();
        if (existing) throw new WeirError('conflict', `App ${JSON.stringify(body.id)} already exists (tenant ${JSON.stringify(existing.tenant_id)}); app ids are unique across tenants.`, { param: 'id' });
        await trx.insertInto('apps').values({ id: body.id, tenant_id: tenantId, name: body.name, limits: JSON.stringify(body.limits ?? {}) }).execute();
        const after = await requireApp(trx, tenantId, body.id);
        return { before: null, after, result: after };
      });
      withVersion(res, version);
      return result;
    }, 201),
  );

  router.get('/tenants/:tenantId/apps/:appId', handle(async (req) => requireApp(db, String(req.params.tenantId), String(req.params.appId))));

  router.patch(
    '/tenants/:tenantId/apps/:appId',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const appId = String(req.params.appId);
      const body = parseBody(appPatchBody, req.body);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'app.update', entityType: 'app', entityId: appId }, async (trx) => {
        const before = await requireApp(trx, tenantId, appId);
        if (body.name !== undefined) await trx.updateTable('apps').set({ name: body.name }).where('id', '=', appId).execute();
        if (body.limits !== undefined) await trx.updateTable('apps').set({ limits: JSON.stringify(body.limits ?? {}) }).where('id', '=', appId).execute();
        const after = await requireApp(trx, tenantId, appId);
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/tenants/:tenantId/apps/:appId',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const appId = String(req.params.appId);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'app.delete', entityType: 'app', entityId: appId }, async (trx) => {
        const before = await requireApp(trx, tenantId, appId);
        const revocations = await activeKeyRevocations(trx, { tenantId, appId });
        await trx.deleteFrom('apps').where('id', '=', appId).execute();
        return { before, after: null, result: { id: appId, deleted: true }, revocations };
      });
      withVersion(res, version);
      return result;
    }),
  );

  // ---- API keys
  router.get(
    '/tenants/:tenantId/keys',
    handle(async (req) => {
      const tenantId = String(req.params.tenantId);
      await requireTenant(db, tenantId);
      const keys = await db.selectFrom('api_keys').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at').orderBy('id').execute();
      return { data: keys.map(apiKeyView) };
    }),
  );

  router.get(
    '/tenants/:tenantId/apps/:appId/keys',
    handle(async (req) => {
      const tenantId = String(req.params.tenantId);
      const appId = String(req.params.appId);
      await requireApp(db, tenantId, appId);
      const keys = await db.selectFrom('api_keys').selectAll().where('app_id', '=', appId).orderBy('created_at').orderBy('id').execute();
      return { data: keys.map(apiKeyView) };
    }),
  );

  router.post(
    '/tenants/:tenantId/apps/:appId/keys',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const appId = String(req.params.appId);
      const body = parseBody(apiKeyCreateBody, req.body);
      const minted = mintApiKey();
      const keyId = newId('key');
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'api_key.create', entityType: 'api_key', entityId: keyId }, async (trx) => {
        await requireApp(trx, tenantId, appId);
        const row = await trx
          .insertInto('api_keys')
          .values({ id: keyId, prefix: minted.prefix, sha256: minted.sha256, tenant_id: tenantId, app_id: appId, label: body.label ?? '' })
          .returningAll()
          .executeTakeFirstOrThrow();
        const after = apiKeyView(row);
        return { before: null, after, result: after };
      });
      withVersion(res, version);
      // The plaintext is in this response only; the store keeps its SHA-256.
      return { ...result, key: minted.plaintext };
    }, 201),
  );

  router.post(
    '/tenants/:tenantId/apps/:appId/keys/:keyId/revoke',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const appId = String(req.params.appId);
      const keyId = String(req.params.keyId);
      await requireApp(db, tenantId, appId);
      const found = await db.selectFrom('api_keys').selectAll().where('id', '=', keyId).where('app_id', '=', appId).executeTakeFirst();
      if (!found) throw notFound('API key', keyId, `list the app's keys with GET /admin/v1/tenants/${tenantId}/apps/${appId}/keys`);
      if (found.revoked_at !== null) return apiKeyView(found);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'api_key.revoke', entityType: 'api_key', entityId: keyId }, async (trx) => {
        const row = await trx.selectFrom('api_keys').selectAll().where('id', '=', keyId).executeTakeFirstOrThrow();
        const updated = await trx.updateTable('api_keys').set({ revoked_at: new Date() }).where('id', '=', keyId).returningAll().executeTakeFirstOrThrow();
        return {
          before: apiKeyView(row),
          after: apiKeyView(updated),
          result: apiKeyView(updated),
          revocations: [{ kind: 'api_key', tenant_id: tenantId, api_key_id: keyId, api_key_sha256: row.sha256 }],
        };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/tenants/:tenantId/apps/:appId/keys/:keyId',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const appId = String(req.params.appId);
      const keyId = String(req.params.keyId);
      await requireApp(db, tenantId, appId);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'api_key.delete', entityType: 'api_key', entityId: keyId }, async (trx) => {
        const row = await trx.selectFrom('api_keys').selectAll().where('id', '=', keyId).where('app_id', '=', appId).executeTakeFirst();
        if (!row) throw notFound('API key', keyId, `list the app's keys with GET /admin/v1/tenants/${tenantId}/apps/${appId}/keys`);
        await trx.deleteFrom('api_keys').where('id', '=', keyId).execute();
        // Revoked on the fast path even when it was revoked before (a gateway that missed it).
        return {
          before: apiKeyView(row),
          after: null,
          result: { id: keyId, deleted: true },
          revocations: [{ kind: 'api_key', tenant_id: tenantId, api_key_id: keyId, api_key_sha256: row.sha256 }],
        };
      });
      withVersion(res, version);
      return result;
    }),
  );

  // ---- policy and kill switch
  router.get(
    '/tenants/:tenantId/policy',
    handle(async (req) => (await requireTenant(db, String(req.params.tenantId))).policy),
  );

  const changePolicy = (action: string, next: (before: JsonObject, body: unknown) => JsonObject) =>
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const { result, version } = await cp.change({ actor: actorOf(req), action, entityType: 'tenant_policy', entityId: tenantId }, async (trx) => {
        const before = (await requireTenant(trx, tenantId)).policy;
        const after = next(before, req.body);
        // A new pin to a revision the alias never had as its stable arm needs a passing eval (409).
        const pinGate = await assertPinGate({ db: trx, beforeRoutes: gatedRoutesOf(before), afterRoutes: gatedRoutesOf(after) });
        await savePolicy(trx, tenantId, after);
        return { before, after: pinGate.length > 0 ? { ...after, pin_gate: pinGate } : after, result: after, revocations: policyRevocations(tenantId, before, after) };
      });
      withVersion(res, version);
      return result;
    });

  router.put('/tenants/:tenantId/policy', changePolicy('policy.replace', (_before, body) => parseBody(policyBody, body)));
  router.patch(
    '/tenants/:tenantId/policy',
    changePolicy('policy.update', (before, body) => {
      const patch = parseBody(policyPatchBody, body);
      const out: JsonObject = { ...before };
      for (const [k, v] of Object.entries(patch)) {
        if (v === null) delete out[k];
        else if (v !== undefined) out[k] = v;
      }
      return out;
    }),
  );

  router.post(
    '/tenants/:tenantId/kill-switch',
    changePolicy('policy.kill_switch', (before, body) => {
      const { enabled } = parseBody(killSwitchBody, body);
      const out: JsonObject = { ...before, kill_switch: enabled };
      return out;
    }),
  );
}
