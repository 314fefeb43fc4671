/**
 * The slice of a structured logger store-pg uses. A `pino` logger satisfies it; so does any
 * object with these three methods. Fields are metadata only (never SQL parameters).
 */
export interface StoreLogger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}
