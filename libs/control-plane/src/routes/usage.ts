import type { Router } from 'express';
import { sql } from 'kysely';
import { WeirError } from '@weir/core';
import { nanoUsdToDecimal, usagePeriod } from '@weir/ledger';
import { z } from 'zod';
import { notFound } from '../admin-error';
import { handle, type RouteContext } from './context';

const usageQuery = z.strictObject({
  tenant: z.string().min(1, 'name the tenant id'),
  internal_id: z.string().min(1).optional(),
  include_deleted: z.enum(['true', 'false']).optional(),
  window: z.enum(['day', 'month']).optional(),
});

/**
 * `GET /admin/v1/usage?tenant=<id>[&window=day|month][&internal_id=<id>][&include_deleted=true]`
 * (issue 14 §4): a tenant's ledger totals for the current UTC day or month (default month), one
 * row per internal id. By default only the tenant's current internal id; `internal_id` names
 * one (a deleted tenant's, for its invoice); `include_deleted=true` adds every internal id the
 * slug has had. A tenant's own `/v1/usage` only ever sees its current internal id.
 * 404 when the tenant does not exist and neither `internal_id` nor `include_deleted` is given.
 */
export function registerUsageRoutes(router: Router, { cp }: RouteContext): void {
  const db = cp.db;
  router.get(
    '/usage',
    handle(async (req) => {
      const parsed = usageQuery.safeParse(req.query);
      if (!parsed.success) {
        const iss = parsed.error.issues[0];
        const param = iss.code === 'unrecognized_keys' ? iss.keys[0] : iss.path.map(String).join('.');
        throw new WeirError(
          'invalid_request',
          iss.code === 'unrecognized_keys'
            ? `unknown query parameter ${JSON.stringify(param)}; GET /admin/v1/usage takes tenant, window, internal_id and include_deleted.`
            : `query parameter ${param}: ${iss.message}.`,
          { param },
        );
      }
      const q = parsed.data;
      const window = q.window ?? 'month';
      const period = usagePeriod(window, Date.now());
      const current = (await db.selectFrom('tenants').select(['uid']).where('id', '=', q.tenant).executeTakeFirst())?.uid;
      const includeDeleted = q.include_deleted === 'true';
      if (current === undefined && q.internal_id === undefined && !includeDeleted) {
        throw notFound('tenant', q.tenant, 'list tenants with GET /admin/v1/tenants, or pass include_deleted=true for a deleted tenant');
      }
      const internalId = sql<string>`coalesce(tenant_uid, tenant_id)`;
      let query = db
        .selectFrom('usage_ledger')
        .select([
          internalId.as('internal_id'),
          sql<string>`count(*)`.as('requests'),
          sql<string>`count(*) filter (where cache_hit is not null)`.as('cache_hits'),
          sql<string>`coalesce(sum(input_tokens), 0)`.as('input'),
          sql<string>`coalesce(sum(output_tokens), 0)`.as('output'),
          sql<string>`coalesce(sum(cached_input_tokens), 0)`.as('cached_input'),
          sql<string>`coalesce(sum(cache_write_input_tokens), 0)`.as('cache_write_input'),
          sql<string>`coalesce(sum(reasoning_tokens), 0)`.as('reasoning'),
          sql<string>`(coalesce(sum(cost_usd), 0) * 1000000000)::bigint`.as('cost_nano'),
        ])
        .where('tenant_id', '=', q.tenant)
        .where('finished_at', '>=', period.start)
        .where('finished_at', '<', period.end);
      if (q.internal_id !== undefined) query = query.where(internalId, '=', q.internal_id);
      else if (!includeDeleted) query = query.where(internalId, '=', current as string);
      const rows = await query.groupBy(internalId).orderBy(internalId).execute();
      return {
        tenant_id: q.tenant,
        window,
        period_start: period.start.toISOString(),
        period_end: period.end.toISOString(),
        data: rows.map((r) => ({
          tenant_id: q.tenant,
          internal_id: r.internal_id,
          deleted: r.internal_id !== current,
          requests: Number(r.requests),
          // Of `requests`, those answered from the response cache (docs/caching.md).
          cache_hits: Number(r.cache_hits),
          // Token classes as on GET /v1/usage: cache reads and writes are parts of `input`, reasoning of `output`.
          tokens: { input: Number(r.input), output: Number(r.output), cached_input: Number(r.cached_input), cache_write_input: Number(r.cache_write_input), reasoning: Number(r.reasoning) },
          cost_usd: Number(nanoUsdToDecimal(BigInt(r.cost_nano))),
          cost_nano_usd: r.cost_nano,
        })),
      };
    }),
  );
}
