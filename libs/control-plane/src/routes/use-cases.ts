/**
 * `/admin/v1/tenants/{id}/use-cases[/{name}]` (issue 16 item 7; docs/admin-api.md "Use cases"):
 * a tenant's use cases one at a time — list, get, put (create or replace), delete — as entries
 * of its policy's `use_cases`. Each change is one control-plane change (audited, validated with
 * `parseConfig` on the composed configuration, published as a snapshot), and a new version pin
 * passes the eval pin gate like a route's pin.
 */
import type { Router } from 'express';
import { WeirError } from '@weir/core';
import { notFound } from '../admin-error';
import { parseBody, useCaseBody } from '../bodies';
import type { JsonObject } from '../config-shapes';
import { assertPinGate } from '../eval/pin-gate';
import { actorOf, handle, type RouteContext, withVersion } from './context';
import { gatedRoutesOf } from './use-case-pins';
import { requireTenant, savePolicy } from './tenants';

const USE_CASE = /^[A-Za-z0-9._:-]{1,64}$/;

/** A policy's use cases (entries that are objects with a name). */
function useCasesOf(policy: JsonObject): JsonObject[] {
  const list = Array.isArray(policy.use_cases) ? (policy.use_cases as unknown[]) : [];
  return list.filter((u): u is JsonObject => u !== null && typeof u === 'object' && !Array.isArray(u));
}

/** Registers the use-case routes on the admin router. */
export function registerUseCaseRoutes(router: Router, { cp }: RouteContext): void {
  const db = cp.db;
  const hint = (tenantId: string) => `list the tenant's use cases with GET /admin/v1/tenants/${tenantId}/use-cases`;

  router.get(
    '/tenants/:tenantId/use-cases',
    handle(async (req) => ({ object: 'list', data: useCasesOf((await requireTenant(db, String(req.params.tenantId))).policy) })),
  );

  router.get(
    '/tenants/:tenantId/use-cases/:name',
    handle(async (req) => {
      const tenantId = String(req.params.tenantId);
      const name = String(req.params.name);
      const found = useCasesOf((await requireTenant(db, tenantId)).policy).find((u) => u.name === name);
      if (!found) throw notFound('use case', name, hint(tenantId));
      return found;
    }),
  );

  router.put(
    '/tenants/:tenantId/use-cases/:name',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const name = String(req.params.name);
      if (!USE_CASE.test(name)) throw new WeirError('invalid_request', 'A use case name is 1 to 64 letters, digits or . _ : - (for example support.summaries).', { param: 'name' });
      const body = parseBody(useCaseBody, req.body);
      const entry: JsonObject = { name, ...(body as JsonObject) };
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'use_case.put', entityType: 'tenant_policy', entityId: tenantId }, async (trx) => {
        const before = (await requireTenant(trx, tenantId)).policy;
        const list = useCasesOf(before);
        const at = list.findIndex((u) => u.name === name);
        const next = at >= 0 ? list.map((u, i) => (i === at ? entry : u)) : [...list, entry];
        const after: JsonObject = { ...before, use_cases: next };
        const pinGate = await assertPinGate({ db: trx, beforeRoutes: gatedRoutesOf(before), afterRoutes: gatedRoutesOf(after) });
        await savePolicy(trx, tenantId, after);
        return { before, after: pinGate.length > 0 ? { ...after, pin_gate: pinGate } : after, result: entry, revocations: [] };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/tenants/:tenantId/use-cases/:name',
    handle(async (req, res) => {
      const tenantId = String(req.params.tenantId);
      const name = String(req.params.name);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'use_case.delete', entityType: 'tenant_policy', entityId: tenantId }, async (trx) => {
        const before = (await requireTenant(trx, tenantId)).policy;
        const list = useCasesOf(before);
        if (!list.some((u) => u.name === name)) throw notFound('use case', name, hint(tenantId));
        const rest = list.filter((u) => u.name !== name);
        const after: JsonObject = { ...before };
        if (rest.length > 0) after.use_cases = rest;
        else delete after.use_cases;
        await savePolicy(trx, tenantId, after);
        return { before, after, result: { name, deleted: true }, revocations: [] };
      });
      withVersion(res, version);
      return result;
    }),
  );
}
