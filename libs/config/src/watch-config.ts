/**
 * Live routing changes from the configuration file (issue 6: canary weights change live, a
 * rollback takes effect within seconds), until the control plane publishes configuration.
 *
 * The file is polled (`fs.watchFile`, every `intervalMs`): polling sees a file replaced by an
 * editor or by `mv` as well as one written in place, where `fs.watch` loses track of a replaced
 * file on some platforms. A change is parsed and validated in full (`loadConfigFile`); a file
 * that does not parse, or that changes what is served (the revisions: engines, replicas,
 * prices, capabilities — those need a restart, since engines and replicas are built at start),
 * is rejected with the reason and the running configuration stays. Otherwise the new
 * configuration is handed over whole, for the router to swap atomically, with the sections it
 * changed that routing does not cover (tenants' limits, apps, weights, pools and deadlines;
 * process defaults): those apply at the next restart, and the caller must say so — an operator
 * who cuts a budget must not read "applied".
 */
import { unwatchFile, watchFile } from 'node:fs';
import type { PlatformConfig } from '@weir/core';
import { isConfigError } from './config-error';
import { loadConfigFile } from './parse-config';

/** Options of {@link watchConfigFile}. */
export interface WatchConfigOptions {
  /** The configuration running now (the revisions a change must keep). */
  current: PlatformConfig;
  /** Poll interval (ms). Default 500: a change applies within about half a second. */
  intervalMs?: number;
  /**
   * A valid change: apply its routing (the router's `update`). `needsRestart` names the
   * changed sections that are not routing (empty when there are none). Must not throw.
   */
  onUpdate(config: PlatformConfig, needsRestart: string[]): void;
  /** A rejected change, with why (a parse error's path and message, or "revisions changed"). Must not throw. */
  onRejected(reason: string): void;
}

/** A running watch. */
export interface ConfigWatcher {
  stop(): void;
}

/** The changed sections of `next` that routing does not cover (see {@link WatchConfigOptions.onUpdate}). */
export function nonRoutingChanges(current: PlatformConfig, next: PlatformConfig): string[] {
  const tenantsOutsideRouting = (c: PlatformConfig) => JSON.stringify(c.tenants.map(({ allowedAliases: _a, routes: _r, ...rest }) => rest));
  const changed: string[] = [];
  if (tenantsOutsideRouting(current) !== tenantsOutsideRouting(next)) changed.push('tenants (limits, budgets, apps, weights, pools, deadlines)');
  if (JSON.stringify(current.defaults) !== JSON.stringify(next.defaults)) changed.push('defaults');
  return changed;
}

/** Starts watching `filePath` (see the module comment). */
export function watchConfigFile(filePath: string, options: WatchConfigOptions): ConfigWatcher {
  let current = options.current;
  const listener = (now: { mtimeMs: number; size: number }, before: { mtimeMs: number; size: number }) => {
    if (now.mtimeMs === before.mtimeMs && now.size === before.size) return;
    let next: PlatformConfig;
    try {
      next = loadConfigFile(filePath);
    } catch (err) {
      options.onRejected(isConfigError(err) ? err.message : `cannot read the configuration: ${String(err)}`);
      return;
    }
    if (JSON.stringify(next.revisions) !== JSON.stringify(current.revisions)) {
      options.onRejected('the revisions changed (engines, replicas, prices or capabilities): restart to apply them; routing changes in the same edit were not applied');
      return;
    }
    const needsRestart = nonRoutingChanges(current, next);
    current = next;
    options.onUpdate(next, needsRestart);
  };
  watchFile(filePath, { interval: options.intervalMs ?? 500, persistent: false }, listener);
  return { stop: () => unwatchFile(filePath, listener) };
}
