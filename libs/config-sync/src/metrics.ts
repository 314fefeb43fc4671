/**
 * Configuration-sync metrics: a small interface the subscriber calls, and an OpenTelemetry
 * implementation over a `Meter` (the instruments `@weir/telemetry` exports through Prometheus).
 */
import type { Meter } from '@opentelemetry/api';
import type { ConfigRejectionReason, ConfigSyncStatus } from './subscriber';

/**
 * OpenTelemetry instrument names. The pinned Prometheus exporter replaces `.` with `_`, appends
 * `_total` to counters and adds no unit suffix, giving {@link CONFIG_SYNC_PROMETHEUS_SERIES}.
 */
export const CONFIG_SYNC_METRIC_NAMES = {
  /** Gauge, 1: the applied snapshot version (absent before the first). */
  snapshotVersion: 'weir.config.snapshot.version',
  /** Gauge, s: the applied snapshot's age (now − max(issued_at, latest heartbeat for it)). */
  snapshotAgeSeconds: 'weir.config.snapshot.age_seconds',
  /** Counter, {message}: messages rejected, by `reason` (see `ConfigRejectionReason`). */
  snapshotRejections: 'weir.config.snapshot.rejections',
} as const;

/** The same series as scraped from `/metrics`. */
export const CONFIG_SYNC_PROMETHEUS_SERIES = {
  snapshotVersion: 'weir_config_snapshot_version',
  snapshotAgeSeconds: 'weir_config_snapshot_age_seconds',
  snapshotRejections: 'weir_config_snapshot_rejections_total',
} as const;

/** What a snapshot subscriber reports. Every method must be cheap and must not throw. */
export interface ConfigSyncMetrics {
  /** A snapshot was applied (`issuedAtMs`: epoch ms). */
  applied(version: number, issuedAtMs: number): void;
  /** A message was rejected. */
  rejected(reason: ConfigRejectionReason): void;
  /**
   * Optional: the subscriber registers its status reader here once, at creation; gauges read it
   * at each scrape (version and age change without events).
   */
  observe?(read: () => ConfigSyncStatus): void;
}

/**
 * {@link ConfigSyncMetrics} as OpenTelemetry instruments on `meter`: observable gauges
 * `weir.config.snapshot.version` and `weir.config.snapshot.age_seconds` (read from the
 * registered subscriber at collection; nothing is reported before a snapshot is applied) and the
 * counter `weir.config.snapshot.rejections` by `reason`. Create one per process and give it to
 * one subscriber.
 */
export function createConfigSyncMetrics(meter: Meter): ConfigSyncMetrics {
  const version = meter.createObservableGauge(CONFIG_SYNC_METRIC_NAMES.snapshotVersion, { unit: '1', description: 'Applied configuration snapshot version' });
  const age = meter.createObservableGauge(CONFIG_SYNC_METRIC_NAMES.snapshotAgeSeconds, {
    unit: 's',
    description: 'Age of the applied configuration snapshot: now minus the later of its issue time and its latest heartbeat',
  });
  const rejections = meter.createCounter(CONFIG_SYNC_METRIC_NAMES.snapshotRejections, {
    unit: '{message}',
    description: 'Configuration messages rejected, by reason',
  });
  let read: (() => ConfigSyncStatus) | undefined;
  meter.addBatchObservableCallback(
    (result) => {
      const s = read?.();
      if (s?.version === undefined || s.ageMs === undefined) return;
      result.observe(version, s.version);
      result.observe(age, s.ageMs / 1000);
    },
    [version, age],
  );
  return {
    applied: () => undefined,
    rejected(reason) {
      rejections.add(1, { reason });
    },
    observe(r) {
      read = r;
    },
  };
}
