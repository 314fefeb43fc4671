/**
 * A bad input to a capacity function: `field` names the input at fault in the function's own
 * naming (`rps`, `profile.kvTokens`, …), so a caller (the `weir` CLI, a controller) can map it to
 * its own flag or setting; `message` says what to fix.
 */
export class CapacityInputError extends Error {
  constructor(
    /** The input at fault, e.g. `replicaTokensPerSecond` or `profile.decodeStepMs`. */
    readonly field: string,
    /** What is wrong and what is expected, without the field name (the caller prefixes it). */
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
    this.name = 'CapacityInputError';
  }
}

/** True when `value` is a {@link CapacityInputError}. */
export function isCapacityInputError(value: unknown): value is CapacityInputError {
  return value instanceof CapacityInputError;
}

/** Throws unless `value` is a finite number > 0 (or ≥ 0 with `allowZero`). */
export function requirePositive(field: string, value: number, opts: { allowZero?: boolean; integer?: boolean } = {}): void {
  const kind = opts.integer ? 'an integer' : 'a number';
  const bound = opts.allowZero ? '≥ 0' : '> 0';
  if (typeof value !== 'number' || !Number.isFinite(value) || (opts.allowZero ? value < 0 : value <= 0) || (opts.integer && !Number.isInteger(value))) {
    throw new CapacityInputError(field, `must be ${kind} ${bound} (got ${String(value)})`);
  }
}
