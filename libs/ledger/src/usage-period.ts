import type { UsageWindow } from '@weir/core';

/** A half-open UTC period `[start, end)`. */
export interface UsagePeriod {
  start: Date;
  /** The first instant after the period (exclusive). */
  end: Date;
}

/**
 * The UTC calendar month or day containing `atMs` (epoch ms), as `[start, end)`: the same
 * periods admission budgets over (monthly and daily budgets reset at 00:00 UTC).
 * E.g. `month` at 2026-11-30T23:59Z → [2026-11-01T00:00Z, 2026-12-01T00:00Z).
 */
export function usagePeriod(window: UsageWindow, atMs: number): UsagePeriod {
  const at = new Date(atMs);
  const y = at.getUTCFullYear();
  const m = at.getUTCMonth();
  if (window === 'month') return { start: new Date(Date.UTC(y, m, 1)), end: new Date(Date.UTC(y, m + 1, 1)) };
  const d = at.getUTCDate();
  return { start: new Date(Date.UTC(y, m, d)), end: new Date(Date.UTC(y, m, d + 1)) };
}

/**
 * Integer nano-USD → an exact decimal USD string with 9 fractional digits
 * (`1_500_000_001n` → `"1.500000001"`, `-5n` → `"-0.000000005"`). No float touches the value.
 */
export function nanoUsdToDecimal(nano: bigint): string {
  const sign = nano < 0n ? '-' : '';
  const digits = (nano < 0n ? -nano : nano).toString().padStart(10, '0');
  return `${sign}${digits.slice(0, -9)}.${digits.slice(-9)}`;
}
