import path from 'node:path';
import { checkSuppliedApiKey } from '@weir/core';
import { ConfigError, type ConfigProblem } from './config-error';

/** pino's level names. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** One of {@link LOG_LEVELS}. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The all-in-one's settings, validated from the environment. */
export interface AllInOneEnv {
  /** `PORT`: TCP port of the HTTP server, 0–65535 (0 = any free port). Default 8080. */
  port: number;
  /** `HOST`: interface to listen on. Default `127.0.0.1` (loopback only). */
  host: string;
  /** `WEIR_DATA_DIR`, made absolute: PGlite data, model cache, last good config. Default `.data`. */
  dataDir: string;
  /** `<dataDir>/models`: where downloaded models are cached (for `resolveModelFile`). */
  modelCacheDir: string;
  /** `WEIR_MODEL_PATH`, made absolute: a GGUF file overriding the default revision's model. */
  modelPath?: string;
  /** `WEIR_CONFIG`, made absolute: the configuration file; unset means `defaultConfig()`. */
  configPath?: string;
  /** `WEIR_DEMO_API_KEY`: the demo tenant's key (`wk_<prefix>_<secret>`); unset means generate one. Secret: never log it. */
  demoApiKey?: string;
  /** `DATABASE_URL` (`postgres://` or `postgresql://`); unset means embedded PGlite in `dataDir`. Secret: never log it. */
  databaseUrl?: string;
  /** `LOG_LEVEL`: one of {@link LOG_LEVELS}. Default `info`. */
  logLevel: LogLevel;
  /** `WEIR_ALLOW_MODEL_DOWNLOAD`: `true|false|1|0|yes|no`. Default true. */
  allowModelDownload: boolean;
  /** `WEIR_SHUTDOWN_GRACE_MS`: how long in-flight streams may finish after SIGTERM (ms). Default 10,000. */
  shutdownGraceMs: number;
  /** `WEIR_BURN_RATE_INTERVAL_MS`: time between burn-rate checks (ms), 100–86,400,000. Default 60,000. */
  burnRateIntervalMs: number;
  /**
   * `WEIR_JOURNAL_SYNC_MS`: the settlement journal's group `fdatasync` interval (ms), 1–10,000: what a
   * machine crash may lose (a killed process loses nothing; ADR 0002). Default 20.
   */
  journalSyncMs: number;
  /** `WEIR_JOURNAL_PROGRESS_MS`: least time between two progress marks of one stream (ms), 100–600,000. Default 1,000. */
  journalProgressMs: number;
}

/**
 * Reads and validates the all-in-one's environment variables (see {@link AllInOneEnv} for
 * each one and its default). Empty strings count as unset. Relative paths are resolved
 * against the current working directory.
 *
 * @throws {ConfigError} (source `environment`) listing every invalid variable by name, what
 *   was expected and how to fix it. Secret values (keys, database URLs) are never echoed.
 */
export function loadAllInOneEnv(env: NodeJS.ProcessEnv): AllInOneEnv {
  const problems: ConfigProblem[] = [];
  const get = (name: string): string | undefined => {
    const v = env[name]?.trim();
    return v === undefined || v === '' ? undefined : v;
  };
  const bad = (name: string, message: string) => problems.push({ path: name, message });

  const integer = (name: string, def: number, min: number, max: number, hint: string): number => {
    const raw = get(name);
    if (raw === undefined) return def;
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      bad(name, `expected an integer from ${min} to ${max}, got ${JSON.stringify(raw)}; ${hint}`);
      return def;
    }
    return n;
  };

  const port = integer('PORT', 8080, 0, 65535, 'set a free TCP port such as 8080, or unset it');
  const host = get('HOST') ?? '127.0.0.1';
  const dataDir = path.resolve(get('WEIR_DATA_DIR') ?? '.data');
  const modelPathRaw = get('WEIR_MODEL_PATH');
  const configPathRaw = get('WEIR_CONFIG');

  const demoApiKey = get('WEIR_DEMO_API_KEY');
  if (demoApiKey !== undefined) {
    const problem = checkSuppliedApiKey(demoApiKey);
    if (problem !== undefined) bad('WEIR_DEMO_API_KEY', problem);
  }

  const databaseUrl = get('DATABASE_URL');
  if (databaseUrl !== undefined && !isPostgresUrl(databaseUrl)) {
    bad('DATABASE_URL', 'expected a postgres:// or postgresql:// URL (value not shown); unset it to use the embedded database');
  }

  const levelRaw = get('LOG_LEVEL')?.toLowerCase() ?? 'info';
  const logLevel = (LOG_LEVELS as readonly string[]).includes(levelRaw) ? (levelRaw as LogLevel) : undefined;
  if (logLevel === undefined) bad('LOG_LEVEL', `expected one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(get('LOG_LEVEL'))}`);

  let allowModelDownload = true;
  const dl = get('WEIR_ALLOW_MODEL_DOWNLOAD')?.toLowerCase();
  if (dl !== undefined) {
    if (['true', '1', 'yes', 'on'].includes(dl)) allowModelDownload = true;
    else if (['false', '0', 'no', 'off'].includes(dl)) allowModelDownload = false;
    else bad('WEIR_ALLOW_MODEL_DOWNLOAD', `expected true or false, got ${JSON.stringify(get('WEIR_ALLOW_MODEL_DOWNLOAD'))}`);
  }

  const shutdownGraceMs = integer('WEIR_SHUTDOWN_GRACE_MS', 10_000, 0, 3_600_000, 'set the drain budget in milliseconds, e.g. 10000');
  const burnRateIntervalMs = integer('WEIR_BURN_RATE_INTERVAL_MS', 60_000, 100, 86_400_000, 'set the time between burn-rate checks in milliseconds, e.g. 60000');
  const journalSyncMs = integer('WEIR_JOURNAL_SYNC_MS', 20, 1, 10_000, 'set the settlement journal fsync interval in milliseconds, e.g. 20');
  const journalProgressMs = integer('WEIR_JOURNAL_PROGRESS_MS', 1_000, 100, 600_000, 'set the least time between progress marks of a stream in milliseconds, e.g. 1000');

  if (problems.length > 0) throw new ConfigError('environment', problems);
  return {
    port,
    host,
    dataDir,
    modelCacheDir: path.join(dataDir, 'models'),
    ...(modelPathRaw !== undefined ? { modelPath: path.resolve(modelPathRaw) } : {}),
    ...(configPathRaw !== undefined ? { configPath: path.resolve(configPathRaw) } : {}),
    ...(demoApiKey !== undefined ? { demoApiKey } : {}),
    ...(databaseUrl !== undefined ? { databaseUrl } : {}),
    logLevel: logLevel ?? 'info',
    allowModelDownload,
    shutdownGraceMs,
    burnRateIntervalMs,
    journalSyncMs,
    journalProgressMs,
  };
}

function isPostgresUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return url.protocol === 'postgres:' || url.protocol === 'postgresql:';
  } catch {
    return false;
  }
}
