import type { Router } from 'express';
import { type Kysely, sql } from 'kysely';
import { WeirError } from '@weir/core';
import { BUILT_IN_PROFILES, BUILT_IN_PROFILE_NAMES } from '@weir/redaction';
import type { WeirSchema } from '@weir/store-pg';
import { notFound } from '../admin-error';
import { parseBody, redactionProfileBody } from '../bodies';
import { ID_PATTERN, type JsonObject } from '../config-shapes';
import { actorOf, handle, type RouteContext, withVersion } from './context';

/** A profile as the admin API shows it: its name, whether it is built in, and its spec (file shape). */
interface ProfileView {
  name: string;
  builtin: boolean;
  spec: JsonObject;
}

const builtInViews: ProfileView[] = BUILT_IN_PROFILES.map((p) => ({
  name: p.name,
  builtin: true,
  spec: {
    recognizers: [...p.recognizers],
    replacement: p.replacement ?? 'tag',
    ...(p.entropyMinLength !== undefined ? { entropy_min_length: p.entropyMinLength } : {}),
    ...(p.redactUuids !== undefined ? { redact_uuids: p.redactUuids } : {}),
  },
}));

async function stored(db: Kysely<WeirSchema>, name: string): Promise<ProfileView | undefined> {
  const row = await db.selectFrom('redaction_profiles').select(['id', 'spec']).where('id', '=', name).executeTakeFirst();
  return row ? { name: row.id, builtin: false, spec: row.spec as JsonObject } : undefined;
}

function checkName(name: string): void {
  if (!ID_PATTERN.test(name)) throw new WeirError('invalid_request', 'A profile name is 1 to 128 letters, digits or . _ : @ / - (starting with a letter or digit).', { param: 'name' });
  if (BUILT_IN_PROFILE_NAMES.includes(name)) throw new WeirError('invalid_request', `'${name}' is a built-in profile and cannot be changed; choose another name.`, { param: 'name' });
}

/**
 * Named PII redaction profiles (issue 15, item 5), the configuration's `redaction_profiles`:
 * `GET /redaction-profiles` (built-ins first), `GET /redaction-profiles/{name}`,
 * `PUT /redaction-profiles/{name}` (create or replace; the composed configuration is checked, so a
 * bad RE2 pattern is a 400 naming the field), `DELETE /redaction-profiles/{name}` (409 while a
 * tenant's policy names it). Tenants choose one with their policy's `redaction_profile`.
 */
export function registerRedactionRoutes(router: Router, { cp }: RouteContext): void {
  const db = cp.db;
  router.get(
    '/redaction-profiles',
    handle(async () => {
      const rows = await db.selectFrom('redaction_profiles').select(['id', 'spec']).orderBy('created_at').orderBy('id').execute();
      return { data: [...builtInViews, ...rows.map((r) => ({ name: r.id, builtin: false, spec: r.spec as JsonObject }))] };
    }),
  );

  router.get(
    '/redaction-profiles/:name',
    handle(async (req) => {
      const name = String(req.params.name);
      const view = builtInViews.find((p) => p.name === name) ?? (await stored(db, name));
      if (!view) throw notFound('redaction profile', name, 'list profiles with GET /admin/v1/redaction-profiles');
      return view;
    }),
  );

  router.put(
    '/redaction-profiles/:name',
    handle(async (req, res) => {
      const name = String(req.params.name);
      checkName(name);
      const spec = parseBody(redactionProfileBody, req.body) as JsonObject;
      const json = JSON.stringify(spec);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'redaction_profile.put', entityType: 'redaction_profile', entityId: name }, async (trx) => {
        const before = (await stored(trx, name)) ?? null;
        if (before) await trx.updateTable('redaction_profiles').set({ spec: json, updated_at: new Date() }).where('id', '=', name).execute();
        else await trx.insertInto('redaction_profiles').values({ id: name, spec: json }).execute();
        const after: ProfileView = { name, builtin: false, spec };
        return { before, after, result: after };
      });
      withVersion(res, version);
      return result;
    }),
  );

  router.delete(
    '/redaction-profiles/:name',
    handle(async (req, res) => {
      const name = String(req.params.name);
      checkName(name);
      const { result, version } = await cp.change({ actor: actorOf(req), action: 'redaction_profile.delete', entityType: 'redaction_profile', entityId: name }, async (trx) => {
        const before = await stored(trx, name);
        if (!before) throw notFound('redaction profile', name, 'list profiles with GET /admin/v1/redaction-profiles');
        const users = await trx.selectFrom('tenant_policies').select('tenant_id').where(sql<string>`policy->>'redaction_profile'`, '=', name).execute();
        if (users.length > 0) {
          throw new WeirError('conflict', `Redaction profile ${JSON.stringify(name)} is used by ${users.map((u) => JSON.stringify(u.tenant_id)).join(', ')}; change their policies first.`);
        }
        await trx.deleteFrom('redaction_profiles').where('id', '=', name).execute();
        return { before, after: null, result: { name, deleted: true } };
      });
      withVersion(res, version);
      return result;
    }),
  );
}
