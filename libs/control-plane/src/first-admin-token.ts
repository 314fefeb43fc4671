import type { Kysely } from 'kysely';
import { newId } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { mintAdminToken } from './admin-token';
import { lockChanges, writeAudit } from './control-plane';

/** The actor recorded when a first admin token is minted on start. */
export const FIRST_ADMIN_TOKEN_ACTOR = { id: 'system:bootstrap', label: 'first start' } as const;

/**
 * Mints an admin token (role `admin`, label `bootstrap (generated on first start)`) when the
 * store has never held one — a first start without `WEIR_ADMIN_TOKEN` — storing only its
 * SHA-256, with an audit entry. A store that holds any admin token, even only revoked ones, gets
 * none: revoking is deliberate (register a new one with `WEIR_ADMIN_TOKEN`).
 *
 * @returns the token's plaintext (show it once; it is never stored) when one was minted, else
 *   undefined.
 */
export async function mintFirstAdminToken(db: Kysely<WeirSchema>): Promise<string | undefined> {
  return db.transaction().execute(async (trx) => {
    // The change lock serializes this with another process starting on the same database.
    await lockChanges(trx);
    const any = await trx.selectFrom('admin_tokens').select('id').limit(1).executeTakeFirst();
    if (any) return undefined;
    const minted = mintAdminToken();
    const id = newId('adm');
    const label = 'bootstrap (generated on first start)';
    await trx.insertInto('admin_tokens').values({ id, prefix: minted.prefix, sha256: minted.sha256, role: 'admin', label }).execute();
    await writeAudit(trx, { actor: FIRST_ADMIN_TOKEN_ACTOR, action: 'admin_token.create', entityType: 'admin_token', entityId: id }, null, { id, prefix: minted.prefix, display: `wa_${minted.prefix}_…`, role: 'admin', label }, null, new Date());
    return minted.plaintext;
  });
}
