/**
 * The logging surface the messaging libraries use: a structural subset of pino's `Logger`, so a
 * pino logger (or a child of one) can be passed as is. Fields are metadata only (subjects,
 * counts, attempt numbers, errors), never message payloads.
 */
export interface MessagingLogger {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

/** A logger that drops everything (the default when none is given). */
export const silentMessagingLogger: MessagingLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};
