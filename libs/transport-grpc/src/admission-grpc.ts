/**
 * `AdmissionService` over gRPC (`weir.admission.v1.AdmissionService`).
 */
import { type MessageInitShape, create } from '@bufbuild/protobuf';
import { type AdmissionService, type RateLimitStatus, type RateLimitWindow, type ReserveResult, WeirError } from '@weir/core';
import { admissionV1 } from '@weir/proto';
import { type GrpcClientOptions, createGrpcConnection } from './client-connection';
import { type GrpcServerBindingOptions, type GrpcServiceBinding, bindService, unaryHandler } from './server-handlers';
import { callerFromWire, callerToWire, enumFromWire, malformed, toNanoUsd, usageFromWire, usageToWire } from './wire-common';

type RejectReason = Extract<ReserveResult, { ok: false }>['reason'];

const REJECT_REASONS: Record<RejectReason, admissionV1.RejectReason> = {
  rate_limited: admissionV1.RejectReason.RATE_LIMITED,
  concurrency_limited: admissionV1.RejectReason.CONCURRENCY_LIMITED,
  budget_exhausted: admissionV1.RejectReason.BUDGET_EXHAUSTED,
};

/** True when a call's deadline (a Date, or epoch ms; Infinity when none) has passed. */
function pastDeadline(deadline: Date | number): boolean {
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  return Number.isFinite(at) && Date.now() >= at;
}

/** The admission gRPC client: the port plus `close()` for its channel. */
export interface AdmissionGrpcClient extends AdmissionService {
  /** Closes the channel; later calls fail. */
  close(): void;
}

/**
 * Hosts `impl` as `weir.admission.v1.AdmissionService`. Rejections travel as values; a
 * thrown `WeirError` as a status with Weir trailers.
 */
export function createAdmissionGrpcServer(impl: AdmissionService, options: GrpcServerBindingOptions = {}): GrpcServiceBinding {
  const { method } = admissionV1.AdmissionService;
  return bindService(admissionV1.AdmissionService, {
    reserve: unaryHandler(method.reserve, options.propagator, async (request, call) => {
      const result = await impl.reserve({
        caller: callerFromWire(request.caller),
        requestId: request.requestId,
        generationId: request.generationId,
        expiresAtMs: Number(request.expiresAtMs),
        inputTokens: request.inputTokens,
        maxOutputTokens: request.maxOutputTokens,
        worstCaseCostNanoUsd: Number(request.worstCaseCostNanoUsd),
      });
      // The caller's deadline passed before the answer: it has given up and will never settle
      // this reservation, so release it now rather than hold it until it expires. (grpc-js
      // marks no unary call as cancelled, so the deadline is what tells.)
      if (result.ok && pastDeadline(call.getDeadline())) await impl.release(result.reservationId);
      return create(admissionV1.ReserveResponseSchema, {
        result: result.ok
          ? { case: 'reservation', value: { reservationId: result.reservationId } }
          : {
              case: 'rejection',
              value: {
                reason: REJECT_REASONS[result.reason],
                message: result.message,
                retryAfterMs: result.retryAfterMs === undefined ? undefined : Math.max(0, Math.round(result.retryAfterMs)),
              },
            },
        rateLimits: rateLimitsToWire(result.rateLimits),
      });
    }),
    settle: unaryHandler(method.settle, options.propagator, async (request) => {
      await impl.settle(request.reservationId, { usage: usageFromWire(request.usage), costNanoUsd: Number(request.costNanoUsd) });
      return create(admissionV1.SettleResponseSchema);
    }),
    release: unaryHandler(method.release, options.propagator, async (request) => {
      await impl.release(request.reservationId);
      return create(admissionV1.ReleaseResponseSchema);
    }),
  });
}

/**
 * An admission client over gRPC. Every call has the connection's deadline (default 2 s).
 * `settle` and `release` are idempotent and retried on `UNAVAILABLE`; `reserve` is never
 * retried (a retry could hold twice). Rejects with a `WeirError` (see `fromGrpcError`).
 */
export function createAdmissionGrpcClient(options: GrpcClientOptions): AdmissionGrpcClient {
  const connection = createGrpcConnection(options, 'admission');
  const { method } = admissionV1.AdmissionService;
  return {
    async reserve(request): Promise<ReserveResult> {
      const response = await connection.unary(method.reserve, {
        caller: callerToWire(request.caller),
        requestId: request.requestId,
        generationId: request.generationId,
        expiresAtMs: BigInt(Math.round(request.expiresAtMs)),
        inputTokens: request.inputTokens,
        maxOutputTokens: request.maxOutputTokens,
        worstCaseCostNanoUsd: toNanoUsd(request.worstCaseCostNanoUsd),
      });
      const rateLimits = rateLimitsFromWire(response.rateLimits);
      switch (response.result.case) {
        case 'reservation':
          return { ok: true, reservationId: response.result.value.reservationId, ...(rateLimits ? { rateLimits } : {}) };
        case 'rejection': {
          const r = response.result.value;
          return {
            ok: false,
            reason: enumFromWire(REJECT_REASONS, r.reason, 'rejection.reason'),
            message: r.message,
            ...(r.retryAfterMs === undefined ? {} : { retryAfterMs: r.retryAfterMs }),
            ...(rateLimits ? { rateLimits } : {}),
          };
        }
        case undefined:
          return malformed('ReserveResponse.result is missing');
      }
    },
    async settle(reservationId, settlement) {
      await connection.unary(method.settle, { reservationId, usage: usageToWire(settlement.usage), costNanoUsd: toNanoUsd(settlement.costNanoUsd) });
    },
    async release(reservationId) {
      await connection.unary(method.release, { reservationId });
    },
    close: () => connection.close(),
  };
}

/** Rate-limit windows → wire (absent status or window → unset message). */
function rateLimitsToWire(status: RateLimitStatus | undefined): MessageInitShape<typeof admissionV1.RateLimitStatusSchema> | undefined {
  if (!status) return undefined;
  const window = (w: RateLimitWindow | undefined) =>
    w && { limit: BigInt(Math.max(0, Math.floor(w.limit))), remaining: BigInt(Math.max(0, Math.floor(w.remaining))), resetMs: BigInt(Math.max(0, Math.ceil(w.resetMs))) };
  return { requests: window(status.requests), tokens: window(status.tokens) };
}

/** Wire → rate-limit windows; undefined when the server sent none. */
function rateLimitsFromWire(status: admissionV1.RateLimitStatus | undefined): RateLimitStatus | undefined {
  if (!status) return undefined;
  const window = (w: admissionV1.RateLimitWindow | undefined): RateLimitWindow | undefined =>
    w && { limit: Number(w.limit), remaining: Number(w.remaining), resetMs: Number(w.resetMs) };
  const out: RateLimitStatus = {};
  const requests = window(status.requests);
  const tokens = window(status.tokens);
  if (requests) out.requests = requests;
  if (tokens) out.tokens = tokens;
  return out;
}

/** Options of {@link createAdmissionFailoverClient}: {@link GrpcClientOptions} with several addresses. */
export interface AdmissionFailoverOptions extends Omit<GrpcClientOptions, 'address'> {
  /** Admission instances, preferred first (`host:port`). At least one. */
  addresses: readonly string[];
}

/**
 * Admission over several instances, which are stateless over one Postgres (ADR 0001): a call
 * goes to the instance that last answered (the first address to begin with); when that
 * instance is unreachable (`upstream_unavailable`) the call moves on to the next, so losing
 * an instance costs no requests. `settle` and `release` are idempotent, so moving them is
 * always safe. `reserve` moves only on `upstream_unavailable`: if the instance died after
 * committing a reservation, that hold is left until it expires (deadline + grace) and is
 * then released by reconciliation — a temporary hold, never a double charge. Other errors
 * (timeouts included) are returned as they are.
 * @throws RangeError when `addresses` is empty.
 */
export function createAdmissionFailoverClient(options: AdmissionFailoverOptions): AdmissionGrpcClient {
  const { addresses, ...rest } = options;
  if (addresses.length === 0) throw new RangeError('createAdmissionFailoverClient: at least one address is required');
  const clients = addresses.map((address) => createAdmissionGrpcClient({ ...rest, address }));
  let preferred = 0;
  const call = async <T>(fn: (client: AdmissionService) => Promise<T>): Promise<T> => {
    let last: unknown;
    for (let i = 0; i < clients.length; i++) {
      const index = (preferred + i) % clients.length;
      try {
        const result = await fn(clients[index]);
        preferred = index;
        return result;
      } catch (err) {
        if (!(err instanceof WeirError) || err.code !== 'upstream_unavailable') throw err;
        last = err;
      }
    }
    throw last;
  };
  return {
    reserve: (request) => call((c) => c.reserve(request)),
    settle: (id, settlement) => call((c) => c.settle(id, settlement)),
    release: (id) => call((c) => c.release(id)),
    close() {
      for (const c of clients) c.close();
    },
  };
}
