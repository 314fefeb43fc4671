/**
 * The burn-rate rule (issue 4, deliverable 8): a tenant burns too fast when its spend in the
 * last hour is more than `factor` times its trailing hourly baseline and at least a floor.
 * Pure functions over exact nano-USD: the periodic job that feeds them is
 * `burn-rate-monitor.ts`.
 */
import type { AdmissionDefaults, TenantSpend } from '@weir/core';

/** One hour (ms): the "recent" window of the rule. */
export const HOUR_MS = 3_600_000;

/** The rule's settings: `defaults.admission.burnRate*` of the configuration. */
export type BurnRateSettings = Pick<AdmissionDefaults, 'burnRateFactor' | 'burnRateBaselineHours' | 'burnRateMinHourlyUsd'>;

/** The rule applied to one tenant. */
export interface BurnRateVerdict {
  tenantId: string;
  /** Spend in the last hour (nano-USD, exact). */
  hourlyNanoUsd: bigint;
  /** Spend in the `burnRateBaselineHours` hours before it (nano-USD, exact). */
  baselineNanoUsd: bigint;
  /** Spend in the last hour (USD, for reporting). */
  hourlyUsd: number;
  /** Average hourly spend over the baseline window (USD, for reporting); 0 with no baseline. */
  baselineHourlyUsd: number;
  /**
   * `hourlyUsd / baselineHourlyUsd` (for reporting and the gauge); with no baseline, +Infinity
   * when there was spend in the last hour and 0 when there was none.
   */
  ratio: number;
  /** True when the rule fires (see {@link evaluateBurnRate}). */
  exceeded: boolean;
}

/**
 * Applies the rule to one tenant's spend (`recentNanoUsd` over the last hour,
 * `baselineNanoUsd` over the `burnRateBaselineHours` hours before it). It fires when both:
 *
 * - the last hour's spend is at least `burnRateMinHourlyUsd` (the floor keeps small tenants
 *   quiet), and
 * - it is more than `burnRateFactor` × the baseline's hourly average, compared exactly in
 *   integers: `recent × baselineHours × 10⁶ > round(factor × 10⁶) × baseline` (the factor
 *   counts to 10⁻⁶).
 *
 * A tenant with **no baseline** (no spend in the baseline window: new, or dormant) has an
 * average of 0, so any spend exceeds every multiple of it: the rule fires as soon as the last
 * hour's spend reaches the floor. That is deliberate: a leaked key on a dormant tenant, or a
 * new tenant's runaway loop, is exactly what the alert is for, and the floor is what keeps a
 * new tenant's ordinary first hour quiet. Spend of 0 never fires, whatever the floor.
 *
 * @throws RangeError when a setting is out of range (factor ≤ 0, baseline hours not a
 *   positive integer, a negative floor) or a spend is negative.
 */
export function evaluateBurnRate(spend: TenantSpend, settings: BurnRateSettings): BurnRateVerdict {
  const { burnRateFactor: factor, burnRateBaselineHours: hours, burnRateMinHourlyUsd: minUsd } = settings;
  if (!(Number.isFinite(factor) && factor > 0)) throw new RangeError(`burnRateFactor must be a positive number, got ${factor}`);
  if (!(Number.isSafeInteger(hours) && hours > 0)) throw new RangeError(`burnRateBaselineHours must be a positive integer, got ${hours}`);
  if (!(Number.isFinite(minUsd) && minUsd >= 0)) throw new RangeError(`burnRateMinHourlyUsd must be a non-negative number, got ${minUsd}`);
  const recent = spend.recentNanoUsd;
  const baseline = spend.baselineNanoUsd;
  if (recent < 0n || baseline < 0n) throw new RangeError(`spend must not be negative (tenant ${spend.tenantId})`);

  const floorNano = BigInt(Math.round(minUsd * 1e9));
  const factorMicro = BigInt(Math.round(factor * 1e6));
  const aboveFloor = recent > 0n && recent >= floorNano;
  const aboveBaseline = baseline === 0n ? recent > 0n : recent * BigInt(hours) * 1_000_000n > factorMicro * baseline;

  const hourlyUsd = Number(recent) / 1e9;
  const baselineHourlyUsd = Number(baseline) / hours / 1e9;
  return {
    tenantId: spend.tenantId,
    hourlyNanoUsd: recent,
    baselineNanoUsd: baseline,
    hourlyUsd,
    baselineHourlyUsd,
    ratio: baseline === 0n ? (recent > 0n ? Number.POSITIVE_INFINITY : 0) : (Number(recent) * hours) / Number(baseline),
    exceeded: aboveFloor && aboveBaseline,
  };
}

/** Per tenant in an excursion: when its last alert went out (wall-clock ms). */
export type BurnRateDebounceState = ReadonlyMap<string, number>;

/**
 * Debounces alerts: at most one alert per tenant per `repeatAfterMs` (default one hour) while
 * it stays over the rule, and a fresh alert at once after it has recovered. `verdicts` is the
 * whole of one check: a tenant missing from it (no spend in the window) has recovered.
 * Pure: returns the verdicts to alert on and the next state; `state` is not modified.
 */
export function debounceBurnRate(
  state: BurnRateDebounceState,
  verdicts: readonly BurnRateVerdict[],
  nowMs: number,
  repeatAfterMs: number = HOUR_MS,
): { alerts: BurnRateVerdict[]; state: BurnRateDebounceState } {
  const next = new Map<string, number>();
  const alerts: BurnRateVerdict[] = [];
  for (const v of verdicts) {
    if (!v.exceeded) continue; // recovered (or never over): forgotten, so the next excursion alerts at once
    const last = state.get(v.tenantId);
    if (last === undefined || nowMs - last >= repeatAfterMs) {
      alerts.push(v);
      next.set(v.tenantId, nowMs);
    } else {
      next.set(v.tenantId, last);
    }
  }
  return { alerts, state: next };
}
