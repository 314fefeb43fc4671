/**
 * Exact conversions between integer nano-USD (1e-9 USD) and the `numeric(20,9)` decimal
 * string Postgres stores. String arithmetic, so no float rounding ever touches money.
 */

const NANO_DIGITS = 9;

/**
 * Integer nano-USD → decimal USD string with 9 fractional digits (`1234` → `"0.000001234"`).
 * @throws RangeError when `nano` is not a safe integer.
 */
export function nanoToDecimal(nano: number): string {
  if (!Number.isSafeInteger(nano)) throw new RangeError(`cost must be a safe integer of nano-USD, got ${nano}`);
  const sign = nano < 0 ? '-' : '';
  const digits = Math.abs(nano).toString().padStart(NANO_DIGITS + 1, '0');
  return `${sign}${digits.slice(0, -NANO_DIGITS)}.${digits.slice(-NANO_DIGITS)}`;
}

/**
 * An integer-valued string (a `bigint` from the driver) → number.
 * @throws RangeError when the value is not an integer or exceeds Number.MAX_SAFE_INTEGER
 *   (≈ 9.0e15 nano-USD ≈ 9 million USD): never silently inexact.
 */
export function toSafeInteger(value: string | number | bigint | null | undefined, what: string): number {
  if (value === null || value === undefined) return 0;
  const n = typeof value === 'number' ? value : Number(value);
  if (!Number.isSafeInteger(n) || (typeof value !== 'number' && BigInt(value) !== BigInt(n))) {
    throw new RangeError(`${what} ${String(value)} is not a safe integer`);
  }
  return n;
}
