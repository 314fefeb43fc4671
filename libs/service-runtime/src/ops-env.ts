/**
 * Where a service's ops endpoints listen (`/healthz`, `/readyz`, `/metrics`: docs/security.md §9),
 * read from the environment.
 */
import { EnvError } from './env';

/** The ops listener's settings. */
export interface OpsSettings {
  /** Interface to listen on. Default `127.0.0.1` (only this host can scrape). */
  host: string;
  /** TCP port (0 = any free port), or `off`: no ops listener (and no `/metrics` anywhere). */
  port: number | 'off';
  /** `WEIR_OPS_TOKEN`: when set, the ops endpoints but `/healthz` need it as a Bearer token. Secret: never logged. */
  token?: string;
}

/** Which variables {@link opsSettingsFromEnv} reads, and the default port. */
export interface OpsEnvNames {
  /** e.g. `WEIR_OPS_PORT` (the all-in-one) or `OPS_PORT` (split services). */
  port: string;
  /** e.g. `WEIR_OPS_HOST` or `OPS_HOST`. */
  host: string;
  defaultPort: number;
}

/**
 * Reads the ops settings: `<port>` an integer 0–65535 or `off`, `<host>` an interface,
 * `WEIR_OPS_TOKEN` at least 16 visible ASCII characters. Empty means unset.
 * @throws EnvError naming each bad variable (never echoing the token).
 */
export function opsSettingsFromEnv(env: NodeJS.ProcessEnv, names: OpsEnvNames): OpsSettings {
  const problems: string[] = [];
  const rawPort = env[names.port]?.trim().toLowerCase();
  let port: number | 'off' = names.defaultPort;
  if (rawPort === 'off') port = 'off';
  else if (rawPort) {
    const n = /^\d+$/.test(rawPort) ? Number(rawPort) : NaN;
    if (!Number.isInteger(n) || n > 65_535) problems.push(`${names.port}: expected a port from 0 to 65535 (0 = any free port) or off, got ${JSON.stringify(rawPort)}`);
    else port = n;
  }
  const host = env[names.host]?.trim() || '127.0.0.1';
  const token = env.WEIR_OPS_TOKEN?.trim() || undefined;
  if (token !== undefined && !/^[\x21-\x7e]{16,512}$/.test(token)) problems.push('WEIR_OPS_TOKEN: expected 16 to 512 visible ASCII characters (value not shown)');
  if (problems.length > 0) throw new EnvError(problems);
  return { host, port, ...(token !== undefined ? { token } : {}) };
}
