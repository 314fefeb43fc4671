/**
 * The logging surface of this library: a structural subset of pino's `Logger`, so a pino logger
 * (or a child) can be passed as is. Fields are metadata only (keys, versions, reasons, revisions),
 * never envelope or payload contents, never key material.
 */
export interface ConfigSyncLogger {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

/** A logger that drops everything (the default when none is given). */
export const silentConfigSyncLogger: ConfigSyncLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};
