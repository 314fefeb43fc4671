import type { AdmissionObserver } from '@weir/admission';
import type { WeirLogger, WeirMetrics } from '@weir/telemetry';

/**
 * Admission's events → metrics (`weir_admission_*`) and logs: decisions by outcome and reason,
 * reconciliation actions, and a warning with `overspendNano` (nano-USD) when a settlement
 * exceeds its reservation's worst case (it should not: reserve takes the worst case).
 */
export function admissionObserver(metrics: WeirMetrics, logger: WeirLogger): AdmissionObserver {
  return {
    onDecision: (d) => metrics.recordAdmissionDecision({ outcome: d.outcome, reason: d.reason }),
    onOverspend: (o) => {
      metrics.recordAdmissionOverspend({ tenant: o.tenantId });
      logger.warn({ tenant: o.tenantId, app: o.appId, reservationId: o.reservationId, overspendNano: o.overspendNano }, 'settlement above the reserved worst case');
    },
    onReconciled: (r) => {
      metrics.recordReconciliation(r);
      if (r.expiredSettled + r.expiredReleased + r.corrected > 0) logger.info({ ...r }, 'reservations reconciled with the ledger');
    },
  };
}
