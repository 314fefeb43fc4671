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
 * configuration is handed over whole, for the router to swap atomically.
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
  /** A valid change: apply it (the router's `update`). Must not throw. */
  onUpdate(config: PlatformConfig): void;
  /** A rejected change, with why (a parse error's path and message, or "revisions changed"). Must not throw. */
  onRejected(reason: string): void;
}

/** A running watch. */
export interface ConfigWatcher {
  stop(): void;
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
    current = next;
    options.onUpdate(next);
  };
  watchFile(filePath, { interval: options.intervalMs ?? 500, persistent: false }, listener);
  return { stop: () => unwatchFile(filePath, listener) };
}
