import type { LeasedAdmissionObserver } from '@weir/admission';
import type { WeirLogger, WeirMetrics } from '@weir/telemetry';

/**
 * Admission's events → metrics (`weir_admission_*`) and logs: decisions by outcome and reason,
 * a warning with `overspendNano` (nano-USD) when a settlement exceeds its reservation's worst
 * case (it should not: reserve takes the worst case), lease maintenance failures (retried at the
 * next pass), and what a reclaim of dead holders' leases gave back.
 */
export function admissionObserver(metrics: WeirMetrics, logger: WeirLogger): LeasedAdmissionObserver {
  return {
    onDecision: (d) => metrics.recordAdmissionDecision({ outcome: d.outcome, reason: d.reason }),
    onOverspend: (o) => {
      metrics.recordAdmissionOverspend({ tenant: o.tenantId });
      logger.warn({ tenant: o.tenantId, app: o.appId, reservationId: o.reservationId, overspendNano: o.overspendNano }, 'settlement above the reserved worst case');
    },
    onError: (err, operation) => logger.warn({ err, operation }, 'budget lease maintenance failed; retrying next pass'),
    onReclaimed: (report) => logger.info({ ...report }, 'leases of holders that stopped heartbeating reclaimed'),
  };
}
