/**
 * The logging surface engine adapters use: a structural subset of pino's `Logger`, so a pino
 * logger (or a child of one) can be passed as is. Adapters log metadata only (ids, counts,
 * timings, status codes), never prompt or output text and never credentials.
 */
export interface EngineLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** A logger that drops everything (the default when none is given). */
export const silentLogger: EngineLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};
