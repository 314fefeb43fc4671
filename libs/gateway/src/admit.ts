/**
 * Reserve, then acquire (the pipeline's {@link AdmitService}) composed from in-process ports:
 * the all-in-one's admission and scheduler, or any pair of clients. The split binds the
 * admission service's one-round-trip `Admit` instead (`createAdmitGrpcClient` in
 * `@weir/transport-grpc`); both keep the same contract, so the pipeline does not know which.
 */
import type { AdmissionService, AdmitRejected, AdmitService, Admitted, ReservationRequest, Reserved, ScheduleResult, SchedulerService } from '@weir/core';

/**
 * {@link AdmitService} over `admission` and `scheduler`: `admit` reserves; the slot is asked for
 * only when {@link Admitted.schedule} is called (no extra work in-process). A scheduler refusal
 * other than `no_replica` releases the reservation, as does a scheduler that throws (the error
 * is rethrown); a release that fails is left to the reservation's expiry. `reserve` is
 * `admission.reserve` with settle and release bound to the reservation.
 */
export function composeAdmit(admission: AdmissionService, scheduler: SchedulerService): AdmitService {
  return {
    async reserve(request: ReservationRequest): Promise<Reserved | AdmitRejected> {
      const reserved = await admission.reserve(request);
      if (!reserved.ok) return reserved;
      const { reservationId } = reserved;
      return {
        ok: true,
        reservationId,
        ...(reserved.rateLimits ? { rateLimits: reserved.rateLimits } : {}),
        ...(reserved.reservation ? { reservation: reserved.reservation } : {}),
        settle: (settlement) => admission.settle(reservationId, settlement),
        release: () => admission.release(reservationId),
      };
    },
    async admit(request) {
      const reserved = await admission.reserve(request.reservation);
      if (!reserved.ok) return reserved;
      const { reservationId } = reserved;
      const release = () => admission.release(reservationId);
      const admitted: Admitted = {
        ok: true,
        reservationId,
        ...(reserved.rateLimits ? { rateLimits: reserved.rateLimits } : {}),
        ...(reserved.reservation ? { reservation: reserved.reservation } : {}),
        async schedule(signal): Promise<ScheduleResult> {
          let result: ScheduleResult;
          try {
            result = await scheduler.acquire({ ...request.schedule, caller: request.reservation.caller, signal });
          } catch (err) {
            await release().catch(() => undefined);
            throw err;
          }
          if (!result.ok && result.reason !== 'no_replica') await release().catch(() => undefined);
          return result;
        },
        settle: (settlement) => admission.settle(reservationId, settlement),
        release,
      };
      return admitted;
    },
  };
}
