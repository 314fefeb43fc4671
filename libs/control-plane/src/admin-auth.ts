import type { Kysely } from 'kysely';
import { WeirError, digestsEqual, newId } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { type AdminRole, adminTokenPrefix, checkSuppliedAdminToken, hashAdminToken } from './admin-token';
import { writeAudit } from './control-plane';

/** An authenticated admin: the token's id, label and role. */
export interface AuthenticatedAdmin {
  id: string;
  label: string;
  role: AdminRole;
}

/**
 * Authenticates an `Authorization` header value (`Bearer <admin token>`): looks the token up
 * by its public prefix and compares SHA-256 digests in constant time.
 * @throws WeirError `authentication_failed` (401) when the header is missing or malformed, or
 *   the token is unknown or revoked; the message says which, never echoing the token.
 */
export async function authenticateAdmin(db: Kysely<WeirSchema>, authorization: string | undefined): Promise<AuthenticatedAdmin> {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  if (!m) throw new WeirError('authentication_failed', 'Send an admin token as `Authorization: Bearer wa_<prefix>_<secret>`.');
  const token = m[1];
  const digest = hashAdminToken(token);
  const rows = await db.selectFrom('admin_tokens').select(['id', 'label', 'role', 'sha256', 'revoked_at']).where('prefix', '=', adminTokenPrefix(token)).execute();
  const row = rows.find((r) => digestsEqual(r.sha256, digest));
  if (!row) throw new WeirError('authentication_failed', 'The admin token is not valid; check it, or ask an admin for a new one (POST /admin/v1/admin-tokens).');
  if (row.revoked_at !== null) throw new WeirError('authentication_failed', 'The admin token was revoked; ask an admin for a new one.');
  return { id: row.id, label: row.label, role: row.role };
}

/** What {@link registerBootstrapAdminToken} did. */
export type BootstrapAdminResult = 'registered' | 'present' | 'revoked';

/**
 * Registers an operator-supplied admin token (`WEIR_ADMIN_TOKEN`) with role `admin`, stored
 * as SHA-256, with an audit entry. A token already registered is left as it is — a revoked one
 * stays revoked (`'revoked'`: revocation is deliberate). Safe to run from several processes.
 *
 * @throws WeirError `invalid_request` when the token is malformed; `conflict` when another
 *   token already uses its public prefix.
 */
export async function registerBootstrapAdminToken(db: Kysely<WeirSchema>, token: string): Promise<BootstrapAdminResult> {
  const problem = checkSuppliedAdminToken(token);
  if (problem) throw new WeirError('invalid_request', `WEIR_ADMIN_TOKEN: ${problem}`);
  const digest = hashAdminToken(token);
  const prefix = adminTokenPrefix(token);
  return db.transaction().execute(async (trx) => {
    const existing = await trx.selectFrom('admin_tokens').select(['sha256', 'revoked_at']).where('prefix', '=', prefix).executeTakeFirst();
    if (existing && digestsEqual(existing.sha256, digest)) return existing.revoked_at === null ? 'present' : 'revoked';
    if (existing) throw new WeirError('conflict', `WEIR_ADMIN_TOKEN: another admin token already uses the prefix wa_${prefix}_; choose another token`);
    const id = newId('adm');
    const label = 'bootstrap (WEIR_ADMIN_TOKEN)';
    const row = await trx
      .insertInto('admin_tokens')
      .values({ id, prefix, sha256: digest, role: 'admin', label })
      .onConflict((oc) => oc.doNothing())
      .returning(['id', 'created_at'])
      .executeTakeFirst();
    if (!row) return 'present';
    await writeAudit(trx, { actor: { id: 'system:bootstrap', label: 'WEIR_ADMIN_TOKEN' }, action: 'admin_token.create', entityType: 'admin_token', entityId: id }, null, { id, prefix, display: `wa_${prefix}_…`, role: 'admin', label }, null, new Date());
    return 'registered';
  });
}
