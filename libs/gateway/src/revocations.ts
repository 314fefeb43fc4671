/**
 * The revocation fast path at the gateway (issue 7, item 4; ARCHITECTURE.md §4): revoked keys,
 * disabled tenants and kill switches, applied the moment a revocation message arrives and
 * checked by the authenticate middleware on every request — a revoked key is refused before
 * the key cache is even consulted, so a cache entry that still holds it does not matter.
 *
 * Two sources feed it: revocation messages (`revokeKey`, `setTenantDisabled`, `setKillSwitch`)
 * and full configuration snapshots (`applyConfig`), whose tenant flags replace the fast-path
 * tenant state (a snapshot built after the revocation carries the same state; a later snapshot
 * may lift it). Key revocations are never undone by a snapshot: a revoked key stays revoked.
 *
 * What is refused from now on also stops what is running: each new refusal (a key revoked, a
 * tenant disabled, a kill switch engaged — by message or by snapshot) is told to the
 * `onRevoked` listeners, and the gateway stops that key's or tenant's generations in flight.
 */
import type { TenantSpec } from '@weir/core';

/** A key to revoke or check: its id (`api_keys.id`), the SHA-256 (hex) of the whole key, or both. */
export interface RevokedKeyRef {
  keyId?: string;
  sha256?: string;
}

/** Why a tenant's requests are refused now; `undefined` from {@link Revocations.tenantRefusal} when they are not. */
export type TenantRefusal = { code: 'tenant_disabled'; message: string } | { code: 'kill_switch'; message: string };

/** The fast-path state (see the module comment). Every method is synchronous and O(1) on the request path. */
export interface Revocations {
  /**
   * Revokes a key from now on, by id and/or hash, and drops it from the key cache (when one
   * was given to {@link createRevocations}). Idempotent. Throws `TypeError` when neither
   * `keyId` nor `sha256` is given.
   */
  revokeKey(key: RevokedKeyRef): void;
  /** Disables (true) or re-enables (false) a tenant: its requests get 403 `tenant_disabled`. */
  setTenantDisabled(tenantId: string, disabled: boolean): void;
  /** Engages (true) or lifts (false) a tenant's kill switch: its requests get 503 `kill_switch`. */
  setKillSwitch(tenantId: string, engaged: boolean): void;
  /**
   * Applies a full snapshot's tenants: afterwards exactly the tenants with `disabled` are
   * disabled and exactly those with `killSwitch` are stopped (absent = false, a tenant the
   * snapshot no longer lists is neither). Revoked keys are kept.
   */
  applyConfig(tenants: readonly Pick<TenantSpec, 'id' | 'disabled' | 'killSwitch'>[]): void;
  /** True when the key was revoked on the fast path (by either of the given id or hash). */
  isKeyRevoked(key: RevokedKeyRef): boolean;
  /** Why `tenantId`'s requests are refused (a disabled tenant before a kill switch), or undefined. */
  tenantRefusal(tenantId: string): TenantRefusal | undefined;
  /**
   * Calls `listener` for every new refusal: `{keyId}` when a key is revoked by id, `{tenantId}`
   * when a tenant becomes disabled or its kill switch engaged (not when one is lifted, nor again
   * for one already refused). A listener that throws is skipped; the others still run.
   */
  onRevoked(listener: (target: RevokedTarget) => void): void;
  /**
   * Applies one fast-path revocation message (docs/config-snapshots.md): `api_key` revokes the
   * key (by id and/or hash), `tenant` disables the tenant (`enabled: false` re-enables it),
   * `kill_switch` engages (`enabled: true`) or lifts it. A message missing what its kind needs
   * is ignored.
   */
  apply(message: RevocationMessage): void;
}

/** A revocation message as the control plane signs it (snake_case, the envelope's payload). */
export interface RevocationMessage {
  kind: 'api_key' | 'tenant' | 'kill_switch';
  tenant_id?: string;
  api_key_id?: string;
  api_key_sha256?: string;
  enabled?: boolean;
}

/** What a new refusal covers (see {@link Revocations.onRevoked}). */
export type RevokedTarget = { keyId: string; reason: 'api_key_revoked' } | { tenantId: string; reason: 'tenant_disabled' | 'kill_switch' };

/** Dependencies of {@link createRevocations}. */
export interface RevocationsDeps {
  /**
   * The key cache in front of the key store (`createCachedApiKeyStore` of `@weir/store-pg`
   * fits): a revoked key's entries are dropped so no later lookup serves it.
   */
  keyCache?: {
    invalidate(sha256Hex?: string): void;
    /** Drops every cached hash whose identity has this key id (a revocation that names only the id). */
    invalidateKeyId?(keyId: string): void;
  };
}

/** Creates an empty fast-path state (nothing revoked). */
export function createRevocations(deps: RevocationsDeps = {}): Revocations {
  const revokedIds = new Set<string>();
  const revokedHashes = new Set<string>();
  let disabled = new Set<string>();
  let killed = new Set<string>();
  const listeners: ((target: RevokedTarget) => void)[] = [];
  const tell = (target: RevokedTarget) => {
    for (const l of listeners) {
      try {
        l(target);
      } catch {
        // one listener's failure must not stop the others (or the revocation itself)
      }
    }
  };

  const revocations: Revocations = {
    onRevoked(listener) {
      listeners.push(listener);
    },
    apply(m) {
      if (m.kind === 'api_key') {
        if (m.api_key_id !== undefined || m.api_key_sha256 !== undefined) {
          revocations.revokeKey({ ...(m.api_key_id !== undefined ? { keyId: m.api_key_id } : {}), ...(m.api_key_sha256 !== undefined ? { sha256: m.api_key_sha256 } : {}) });
        }
      } else if (m.kind === 'tenant' && m.tenant_id) revocations.setTenantDisabled(m.tenant_id, m.enabled !== false);
      else if (m.kind === 'kill_switch' && m.tenant_id) revocations.setKillSwitch(m.tenant_id, m.enabled === true);
    },
    revokeKey(key) {
      if (key.keyId === undefined && key.sha256 === undefined) throw new TypeError('revokeKey needs keyId or sha256');
      if (key.keyId !== undefined) {
        const fresh = !revokedIds.has(key.keyId);
        revokedIds.add(key.keyId);
        deps.keyCache?.invalidateKeyId?.(key.keyId);
        if (fresh) tell({ keyId: key.keyId, reason: 'api_key_revoked' });
      }
      if (key.sha256 !== undefined) {
        const hash = key.sha256.toLowerCase();
        revokedHashes.add(hash);
        deps.keyCache?.invalidate(hash);
      }
    },
    setTenantDisabled(tenantId, on) {
      const fresh = on && !disabled.has(tenantId);
      if (on) disabled.add(tenantId);
      else disabled.delete(tenantId);
      if (fresh) tell({ tenantId, reason: 'tenant_disabled' });
    },
    setKillSwitch(tenantId, on) {
      const fresh = on && !killed.has(tenantId);
      if (on) killed.add(tenantId);
      else killed.delete(tenantId);
      if (fresh) tell({ tenantId, reason: 'kill_switch' });
    },
    applyConfig(tenants) {
      // Built aside and swapped, so a request never sees half a snapshot.
      const nextDisabled = new Set(tenants.filter((t) => t.disabled === true).map((t) => t.id));
      const nextKilled = new Set(tenants.filter((t) => t.killSwitch === true).map((t) => t.id));
      const before = { disabled, killed };
      disabled = nextDisabled;
      killed = nextKilled;
      for (const id of nextDisabled) if (!before.disabled.has(id)) tell({ tenantId: id, reason: 'tenant_disabled' });
      for (const id of nextKilled) if (!before.killed.has(id)) tell({ tenantId: id, reason: 'kill_switch' });
    },
    isKeyRevoked(key) {
      return (key.keyId !== undefined && revokedIds.has(key.keyId)) || (key.sha256 !== undefined && revokedHashes.has(key.sha256.toLowerCase()));
    },
    tenantRefusal(tenantId) {
      if (disabled.has(tenantId)) {
        return { code: 'tenant_disabled', message: `Tenant '${tenantId}' is disabled (or was deleted); its requests are refused until a platform engineer re-enables it — ask your platform team.` };
      }
      if (killed.has(tenantId)) {
        return {
          code: 'kill_switch',
          message: `The kill switch of tenant '${tenantId}' is engaged: its requests are refused until a platform engineer lifts it (retrying does not help).`,
        };
      }
      return undefined;
    },
  };
  return revocations;
}
