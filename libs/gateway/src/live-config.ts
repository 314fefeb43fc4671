/**
 * The parts of the configuration the gateway reads per request besides routing (tenants'
 * deadline defaults and pins, revisions' deprecations), held so a new snapshot replaces them
 * atomically while the gateway serves: readers call `tenants()` / `revisions()` each time and
 * never keep the maps.
 */
import type { PlatformConfig, RevisionSpec, TenantSpec } from '@weir/core';

/** What {@link LiveConfig.update} swaps. */
export type LiveConfigInput = Pick<PlatformConfig, 'revisions' | 'tenants'>;

/** A replaceable view of tenants and revisions, indexed once per update. */
export interface LiveConfig {
  /** Tenants by id, as of the last update. */
  tenants(): ReadonlyMap<string, TenantSpec>;
  /** Revisions by id, as of the last update. */
  revisions(): ReadonlyMap<string, RevisionSpec>;
  /** Replaces both maps at once (the caller validated the configuration with `parseConfig`). */
  update(config: LiveConfigInput): void;
}

/** Creates a {@link LiveConfig} holding `initial`. */
export function createLiveConfig(initial: LiveConfigInput): LiveConfig {
  const index = (c: LiveConfigInput) => ({ tenants: new Map(c.tenants.map((t) => [t.id, t])), revisions: new Map(c.revisions.map((r) => [r.id, r])) });
  let current = index(initial);
  return {
    tenants: () => current.tenants,
    revisions: () => current.revisions,
    update(config) {
      current = index(config);
    },
  };
}
