/**
 * The periodic burn-rate check: reads every tenant's spend from the ledger, applies
 * {@link evaluateBurnRate}, debounces, and publishes {@link BurnRateAlert}s on a topic (NATS in
 * the split topology, in-process in the all-in-one), with a gauge and a counter per tenant.
 */
import type { BurnRateAlert, TenantSpendReader, Topic } from '@weir/core';
import { type BurnRateDebounceState, type BurnRateSettings, type BurnRateVerdict, HOUR_MS, debounceBurnRate, evaluateBurnRate } from './burn-rate';
import type { LedgerLogger } from './batched-usage-sink';

/**
 * Where the monitor reports its measurements (`@weir/telemetry`'s `WeirMetrics` satisfies
 * it): the gauge `weir_tenant_burn_rate_ratio{tenant}` and the counter
 * `weir_burn_rate_alerts_total{tenant}`.
 */
export interface BurnRateMetrics {
  /** The tenant's current ratio (see `BurnRateVerdict.ratio`; +Infinity with no baseline, 0 with no spend). */
  recordBurnRate(sample: { tenant: string; ratio: number }): void;
  /** One alert published for the tenant. */
  recordBurnRateAlert(alert: { tenant: string }): void;
}

/** Options of {@link createBurnRateMonitor}. */
export interface BurnRateMonitorOptions {
  /** `defaults.admission.burnRate*`. */
  settings: BurnRateSettings;
  /** Time between checks (ms). Default 60,000. */
  intervalMs?: number;
  /** While a tenant stays over the rule, the alert repeats at most this often (ms). Default 3,600,000 (one hour). */
  repeatAfterMs?: number;
}

/** Dependencies of {@link createBurnRateMonitor}. */
export interface BurnRateMonitorDeps {
  /** Per-tenant spend from the ledger. */
  spend: TenantSpendReader;
  /** Where alerts are published. */
  alerts: Topic<BurnRateAlert>;
  metrics?: BurnRateMetrics;
  /** Alerts are logged at warn (tenant and amounts, never any text); failed checks too. */
  logger?: LedgerLogger & { info?(fields: object, message: string): void };
  /** Wall clock (epoch ms): the ledger's `finished_at` is wall-clock time. Default `Date.now`. */
  now?: () => number;
}

/** The running check. */
export interface BurnRateMonitor {
  /**
   * Runs one check now: queries `[now − (baselineHours + 1) h, now)`, evaluates every tenant,
   * updates the gauge, publishes and counts the debounced alerts, and returns them.
   * @throws whatever the spend query throws (the periodic loop logs it and tries again next time).
   */
  check(): Promise<BurnRateAlert[]>;
  /** Starts checking every `intervalMs` (the first check one interval from now). Idempotent. */
  start(): void;
  /** Stops the loop and waits for a check in progress. Idempotent. */
  stop(): Promise<void>;
}

/**
 * Creates the burn-rate monitor. Checks never overlap (the next one is scheduled when the
 * previous one ends); the timer does not keep the process alive. One monitor per deployment
 * is enough (each alert is per tenant and debounced in memory: two monitors would each
 * alert once).
 */
export function createBurnRateMonitor(options: BurnRateMonitorOptions, deps: BurnRateMonitorDeps): BurnRateMonitor {
  const intervalMs = options.intervalMs ?? 60_000;
  const repeatAfterMs = options.repeatAfterMs ?? HOUR_MS;
  if (!(Number.isFinite(intervalMs) && intervalMs > 0)) throw new RangeError(`intervalMs must be positive, got ${intervalMs}`);
  const now = deps.now ?? Date.now;
  let state: BurnRateDebounceState = new Map();
  /** Tenants with a gauge value, so one that drops out of the window is set back to 0. */
  const gauged = new Set<string>();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<unknown> | undefined;
  let started = false;

  const toAlert = (v: BurnRateVerdict, atMs: number): BurnRateAlert => ({
    type: 'burn_rate',
    tenant_id: v.tenantId,
    hourly_spend_usd: v.hourlyUsd,
    baseline_hourly_usd: v.baselineHourlyUsd,
    factor: options.settings.burnRateFactor,
    ratio: Number.isFinite(v.ratio) ? v.ratio : null,
    at: new Date(atMs).toISOString(),
  });

  const check = async (): Promise<BurnRateAlert[]> => {
    const atMs = now();
    const recentSince = atMs - HOUR_MS;
    const spend = await deps.spend.spendByTenant({
      baselineSince: new Date(recentSince - options.settings.burnRateBaselineHours * HOUR_MS),
      recentSince: new Date(recentSince),
      until: new Date(atMs),
    });
    const verdicts = spend.map((s) => evaluateBurnRate(s, options.settings));
    const seen = new Set(verdicts.map((v) => v.tenantId));
    for (const v of verdicts) {
      deps.metrics?.recordBurnRate({ tenant: v.tenantId, ratio: v.ratio });
      gauged.add(v.tenantId);
    }
    for (const tenant of gauged) {
      if (seen.has(tenant)) continue;
      deps.metrics?.recordBurnRate({ tenant, ratio: 0 });
      gauged.delete(tenant);
    }
    const debounced = debounceBurnRate(state, verdicts, atMs, repeatAfterMs);
    state = debounced.state;
    const alerts = debounced.alerts.map((v) => toAlert(v, atMs));
    for (const alert of alerts) {
      deps.logger?.warn(
        { tenant: alert.tenant_id, hourlyUsd: alert.hourly_spend_usd, baselineHourlyUsd: alert.baseline_hourly_usd, factor: alert.factor, ratio: alert.ratio },
        'burn-rate alert: tenant spend in the last hour is above its baseline',
      );
      deps.alerts.publish(alert);
      deps.metrics?.recordBurnRateAlert({ tenant: alert.tenant_id });
    }
    return alerts;
  };

  const schedule = () => {
    timer = setTimeout(() => {
      timer = undefined;
      running = check()
        .catch((err: unknown) => deps.logger?.warn({ err }, 'burn-rate check failed; retrying at the next interval'))
        .finally(() => {
          running = undefined;
          if (started) schedule();
        });
    }, intervalMs);
    timer.unref?.();
  };

  return {
    check,
    start() {
      if (started) return;
      started = true;
      schedule();
    },
    async stop() {
      started = false;
      if (timer) clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
