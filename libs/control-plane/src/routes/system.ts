import type { Router } from 'express';
import { WeirError, newId } from '@weir/core';
import { z } from 'zod';
import { notFound } from '../admin-error';
import { mintAdminToken } from '../admin-token';
import { adminTokenCreateBody, emptyBody, parseBody } from '../bodies';
import { adminTokenView, auditView, snapshotSummaryView } from '../views';
import { actorOf, handle, type RouteContext } from './context';

const limit = z.coerce.number().int('expected an integer').min(1, 'expected 1 to 200').max(200, 'expected 1 to 200').default(50);
const cursor = z.coerce.number().int('expected an integer').min(1, 'expected an integer >= 1').optional();
const time = z.string().refine((s) => !Number.isNaN(Date.parse(s)), 'expected an ISO-8601 time such as 2030-01-31T00:00:00Z').optional();

const snapshotsQuery = z.strictObject({ limit, before: cursor });
const auditQuery = z.strictObject({
  limit,
  cursor,
  entity_type: z.string().optional(),
  entity_id: z.string().optional(),
  action: z.string().optional(),
  actor_id: z.string().optional(),
  since: time,
  until: time,
});

/** Parses a query string with `schema` (400 naming the bad parameter). */
function parseQuery<S extends z.ZodType>(schema: S, query: unknown): z.output<S> {
  const r = schema.safeParse(query);
  if (r.success) return r.data;
  const iss = r.error.issues[0];
  const param = iss.code === 'unrecognized_keys' ? iss.keys[0] : iss.path.map(String).join('.');
  const message = iss.code === 'unrecognized_keys' ? `unknown query parameter ${JSON.stringify(param)}` : `query parameter ${param}: ${iss.message}`;
  throw new WeirError('invalid_request', `${message}.`, { param });
}

/** Snapshots, the audit log and admin tokens. */
export function registerSystemRoutes(router: Router, { cp }: RouteContext): void {
  const db = cp.db;

  router.get(
    '/snapshots',
    handle(async (req) => {
      const q = parseQuery(snapshotsQuery, req.query);
      let query = db.selectFrom('config_snapshots').select(['version', 'schema_version', 'issued_at', 'created_by', 'published_at']).orderBy('version', 'desc').limit(q.limit + 1);
      if (q.before !== undefined) query = query.where('version', '<', String(q.before));
      const rows = await query.execute();
      const data = rows.slice(0, q.limit).map(snapshotSummaryView);
      return { data, next_cursor: rows.length > q.limit ? data[data.length - 1].version : null };
    }),
  );

  router.get(
    '/snapshots/:version',
    handle(async (req) => {
      const raw = String(req.params.version);
      let query = db.selectFrom('config_snapshots').selectAll();
      if (raw === 'latest') query = query.orderBy('version', 'desc').limit(1);
      else if (/^[1-9]\d{0,15}$/.test(raw)) query = query.where('version', '=', raw);
      else throw new WeirError('invalid_request', 'The snapshot version must be a positive integer or "latest".', { param: 'version' });
      const row = await query.executeTakeFirst();
      if (!row) throw notFound('snapshot', raw, 'list snapshots with GET /admin/v1/snapshots');
      return { ...snapshotSummaryView(row), config: row.config };
    }),
  );

  router.get(
    '/audit',
    handle(async (req) => {
      const q = parseQuery(auditQuery, req.query);
      let query = db.selectFrom('audit_log').selectAll().orderBy('id', 'desc').limit(q.limit + 1);
      if (q.cursor !== undefined) query = query.where('id', '<', String(q.cursor));
      if (q.entity_type) query = query.where('entity_type', '=', q.entity_type);
      if (q.entity_id) query = query.where('entity_id', '=', q.entity_id);
      if (q.action) query = query.where('action', '=', q.action);
      if (q.actor_id) query = query.where('actor_id', '=', q.actor_id);
      if (q.since) query = query.where('at', '>=', new Date(q.since));
      if (q.until) query = query.where('at', '<', new Date(q.until));
      const rows = await query.execute();
      const data = rows.slice(0, q.limit).map(auditView);
      return { data, next_cursor: rows.length > q.limit ? data[data.length - 1].id : null };
    }),
  );

  router.get('/admin-tokens', handle(async () => ({ data: (await db.selectFrom('admin_tokens').selectAll().orderBy('created_at').orderBy('id').execute()).map(adminTokenView) })));

  router.post(
    '/admin-tokens',
    handle(async (req) => {
      const body = parseBody(adminTokenCreateBody, req.body);
      const minted = mintAdminToken();
      const id = newId('adm');
      const { result } = await cp.change(
        { actor: actorOf(req), action: 'admin_token.create', entityType: 'admin_token', entityId: id },
        async (trx) => {
          const row = await trx.insertInto('admin_tokens').values({ id, prefix: minted.prefix, sha256: minted.sha256, role: body.role, label: body.label }).returningAll().executeTakeFirstOrThrow();
          const after = adminTokenView(row);
          return { before: null, after, result: after };
        },
        { snapshot: false },
      );
      // The plaintext is in this response only; the store keeps its SHA-256.
      return { ...result, token: minted.plaintext };
    }, 201),
  );

  router.post(
    '/admin-tokens/:tokenId/revoke',
    handle(async (req) => {
      parseBody(emptyBody, req.body);
      const id = String(req.params.tokenId);
      const { result } = await cp.change(
        { actor: actorOf(req), action: 'admin_token.revoke', entityType: 'admin_token', entityId: id },
        async (trx) => {
          const row = await trx.selectFrom('admin_tokens').selectAll().where('id', '=', id).executeTakeFirst();
          if (!row) throw notFound('admin token', id, 'list tokens with GET /admin/v1/admin-tokens');
          if (row.revoked_at !== null) return { before: adminTokenView(row), after: adminTokenView(row), result: adminTokenView(row) };
          if (row.role === 'admin') {
            // Changes hold the change lock, so two revocations cannot both see another admin left.
            const others = await trx.selectFrom('admin_tokens').select('id').where('role', '=', 'admin').where('revoked_at', 'is', null).where('id', '!=', id).limit(1).executeTakeFirst();
            if (!others) {
              throw new WeirError(
                'conflict',
                `Admin token ${id} is the last active admin token; revoking it would leave no one able to change the control plane. Create another admin token first (POST /admin/v1/admin-tokens {"role": "admin", "label"}), then revoke this one.`,
              );
            }
          }
          const updated = await trx.updateTable('admin_tokens').set({ revoked_at: new Date() }).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
          return { before: adminTokenView(row), after: adminTokenView(updated), result: adminTokenView(updated) };
        },
        { snapshot: false },
      );
      return result;
    }),
  );
}
