/**
 * `AdmissionService` over gRPC (`weir.admission.v1.AdmissionService`), and `Admit`: reserve and
 * acquire the first slot in one call (the admission instance asks the scheduler for the
 * gateway; issue 13, item 6).
 */
import { randomUUID } from 'node:crypto';
import { type MessageInitShape, create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  type AdmissionService,
  type AdmitRejected,
  type AdmitService,
  type Admitted,
  type Clock,
  type RateLimitStatus,
  type RateLimitWindow,
  type ReservationRequest,
  type Reserved,
  type ReserveResult,
  type ScheduleRequest,
  type ScheduleResult,
  WeirError,
  systemClock,
} from '@weir/core';
import { admissionV1 } from '@weir/proto';
import { type GrpcClientOptions, type GrpcConnection, createGrpcConnection, isServiceError } from './client-connection';
import { fromGrpcError, toGrpcError, weirCodeOf } from './grpc-errors';
import { acquireRequestFromWire, acquireRequestToWire, acquireResultFromWire, acquireResultToWire, type SchedulerGrpcClient } from './scheduler-grpc';
import { type GrpcServerBindingOptions, type GrpcServiceBinding, bindService, unaryHandler } from './server-handlers';
import { deserializerFor, grpcMethodPath, serializerFor } from './service-definition';
import { injectTraceContext, runInServerSpan } from './trace-context';
import { callerFromWire, callerToWire, enumFromWire, malformed, required, reservationFromWire, reservationToWire, toNanoUsd, usageFromWire, usageToWire } from './wire-common';

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

function reserveRequestFromWire(request: admissionV1.ReserveRequest): ReservationRequest {
  return {
    caller: callerFromWire(request.caller),
    requestId: request.requestId,
    generationId: request.generationId,
    expiresAtMs: Number(request.expiresAtMs),
    inputTokens: request.inputTokens,
    maxOutputTokens: request.maxOutputTokens,
    worstCaseCostNanoUsd: Number(request.worstCaseCostNanoUsd),
    ...(request.useCase !== undefined ? { useCase: request.useCase } : {}),
    ...(request.sessionId !== undefined ? { sessionId: request.sessionId } : {}),
  };
}

function reserveRequestToWire(request: ReservationRequest): MessageInitShape<typeof admissionV1.ReserveRequestSchema> {
  return {
    caller: callerToWire(request.caller),
    requestId: request.requestId,
    generationId: request.generationId,
    expiresAtMs: BigInt(Math.round(request.expiresAtMs)),
    inputTokens: request.inputTokens,
    maxOutputTokens: request.maxOutputTokens,
    worstCaseCostNanoUsd: toNanoUsd(request.worstCaseCostNanoUsd),
    ...(request.useCase !== undefined ? { useCase: request.useCase } : {}),
    ...(request.sessionId !== undefined ? { sessionId: request.sessionId } : {}),
  };
}

function reserveResultToWire(result: ReserveResult): admissionV1.ReserveResponse {
  return create(admissionV1.ReserveResponseSchema, {
    result: result.ok
      ? { case: 'reservation', value: { reservationId: result.reservationId, ...(result.reservation ? { ref: reservationToWire(result.reservation) } : {}) } }
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
}

function reserveResultFromWire(response: admissionV1.ReserveResponse): ReserveResult {
  const rateLimits = rateLimitsFromWire(response.rateLimits);
  switch (response.result.case) {
    case 'reservation': {
      const r = response.result.value;
      return { ok: true, reservationId: r.reservationId, ...(rateLimits ? { rateLimits } : {}), ...(r.ref ? { reservation: reservationFromWire(r.ref) } : {}) };
    }
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
}

/**
 * The scheduler `Admit` asks for slots: {@link SchedulerGrpcClient.acquireAs} fits, or an
 * in-process scheduler wrapped to ignore the id.
 */
export interface AdmitScheduler {
  acquireAs(leaseId: string, request: ScheduleRequest): Promise<ScheduleResult>;
}

/** Options of {@link createAdmissionGrpcServer}. */
export interface AdmissionGrpcServerOptions extends GrpcServerBindingOptions {
  /** Where `Admit` acquires slots. Without it `Admit` answers `upstream_unavailable` (UNAVAILABLE). */
  scheduler?: AdmitScheduler;
  /** The clock the scheduler measures deadlines on (Admit's `deadline_in_ms` is rebased on it). Default `systemClock`. */
  clock?: Clock;
}

/**
 * Hosts `impl` as `weir.admission.v1.AdmissionService`. Rejections travel as values; a
 * thrown `WeirError` as a status with Weir trailers. `Admit` reserves, sends the reservation,
 * asks `options.scheduler` for the slot under the caller's lease id and sends its answer; a
 * scheduler refusal other than `no_replica`, a scheduler fault, or a cancelled call (the
 * gateway left or died) releases the reservation here, and a slot granted after the call was
 * cancelled is released at once.
 */
export function createAdmissionGrpcServer(impl: AdmissionService, options: AdmissionGrpcServerOptions = {}): GrpcServiceBinding {
  const { method } = admissionV1.AdmissionService;
  const clock = options.clock ?? systemClock;
  const admitPath = grpcMethodPath(method.admit);

  const admit: grpc.handleServerStreamingCall<admissionV1.AdmitRequest, admissionV1.AdmitResponse> = (call) => {
    let cancelled = call.cancelled;
    const abort = new AbortController();
    const onCancelled = () => {
      cancelled = true;
      abort.abort();
    };
    call.once('cancelled', onCancelled);
    if (cancelled) abort.abort();
    runInServerSpan(admitPath, call.metadata, options.propagator, async () => {
      const acquire = required(call.request.acquire, 'acquire');
      if (acquire.leaseId.length === 0) malformed('acquire.lease_id is empty');
      const request = reserveRequestFromWire(required(call.request.reserve, 'reserve'));
      const scheduler = options.scheduler;
      if (!scheduler) throw new WeirError('upstream_unavailable', 'this admission instance has no scheduler to acquire slots from', { retryable: true, retryAfterMs: 1_000 });
      const reserved = await impl.reserve(request);
      if (!reserved.ok) {
        if (!cancelled) call.write(create(admissionV1.AdmitResponseSchema, { step: { case: 'reserved', value: reserveResultToWire(reserved) } }));
        return;
      }
      const release = () => impl.release(reserved.reservationId);
      if (cancelled) return release();
      call.write(create(admissionV1.AdmitResponseSchema, { step: { case: 'reserved', value: reserveResultToWire(reserved) } }));
      let scheduled: ScheduleResult;
      try {
        scheduled = await scheduler.acquireAs(acquire.leaseId, acquireRequestFromWire(acquire, clock, abort.signal, request.caller));
      } catch (err) {
        await release();
        throw err;
      }
      if (cancelled) {
        // Nobody will use the slot or the reservation: the caller left before the answer.
        if (scheduled.ok) scheduled.lease.release();
        return release();
      }
      if (!scheduled.ok && scheduled.reason !== 'no_replica') await release();
      call.write(create(admissionV1.AdmitResponseSchema, { step: { case: 'scheduled', value: acquireResultToWire(acquire.leaseId, scheduled) } }));
    })
      .then(
        () => {
          if (!cancelled) call.end();
        },
        (error: unknown) => {
          if (!cancelled) call.emit('error', toGrpcError(error));
        },
      )
      .finally(() => call.removeListener('cancelled', onCancelled));
  };

  return bindService(admissionV1.AdmissionService, {
    reserve: unaryHandler(method.reserve, options.propagator, async (request, call) => {
      const result = await impl.reserve(reserveRequestFromWire(request));
      // The caller gave up before the answer (its deadline passed, or — on the mux — it
      // cancelled or its stream broke): it will never settle this reservation, so release it now
      // rather than hold it until it expires. (grpc-js marks no plain unary call as cancelled, so
      // there the deadline is what tells.)
      if (result.ok && (call.cancelled || pastDeadline(call.getDeadline()))) await impl.release(result.reservationId);
      return reserveResultToWire(result);
    }),
    admit,
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
  return admissionClientOn(createGrpcConnection(options, 'admission'));
}

function admissionClientOn(connection: GrpcConnection): AdmissionGrpcClient {
  const { method } = admissionV1.AdmissionService;
  return {
    async reserve(request): Promise<ReserveResult> {
      return reserveResultFromWire(await connection.unary(method.reserve, reserveRequestToWire(request)));
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

/** Options of {@link createAdmitGrpcClient}. */
export interface AdmitGrpcClientOptions extends Omit<GrpcClientOptions, 'address'> {
  /** Admission instances, preferred first (`host:port`). At least one. */
  addresses: readonly string[];
  /** The gateway's scheduler client: releases the slots `Admit` acquired (by lease id). */
  scheduler: Pick<SchedulerGrpcClient, 'leaseOf' | 'releaseById'>;
  /** The clock `ScheduleRequest.deadlineAt` is on. Default `systemClock`. */
  clock?: Clock;
  /** Admit's call deadline is the request's deadline plus this margin (ms), so the scheduler's `deadline` answer arrives first. Default 1,000. */
  acquireMarginMs?: number;
}

/** {@link AdmitService} over gRPC, plus `close()` for its channels. */
export interface AdmitGrpcClient extends AdmitService {
  /** Closes every channel; later calls fail. */
  close(): void;
}

/** Weir codes that mean "this instance did not take the call; another may": safe to move `reserve`/`Admit` on, since nothing was held. */
const MOVE_ON: ReadonlySet<string> = new Set(['upstream_unavailable', 'shutting_down']);

/**
 * {@link AdmitService} over several admission instances (one round trip from the gateway for
 * reserve + acquire; issue 13, item 6; `reserve` alone — a cache hit, which takes no slot — is
 * one unary `Reserve` on the same instances, following the same preference and moving on). A call goes to the instance that last answered (the
 * first address to begin with); one that cannot be reached (or is shutting down) before it
 * answered anything is skipped for the next — nothing was held there (a reservation made before
 * the break is released by that instance when it sees the call end, or died with it). Each
 * reservation is bound to the instance that made it: `settle` and `release` go there (retried
 * on `UNAVAILABLE`); if it is gone they fail, and its leases are reclaimed (ADR 0002). The slot
 * is acquired under a lease id chosen here, so a broken call's slot is released at the scheduler
 * directly (`scheduler.releaseById`), as is a granted one (`scheduler.leaseOf(...).release()`).
 *
 * `schedule(signal)`: `signal` cancels the call (answer `cancelled`; the instance releases the
 * reservation and any slot); the call's deadline is the request's deadline plus
 * `acquireMarginMs` (answer `deadline`); any other failure after the reservation releases both
 * (in the background) and rejects with a `WeirError`.
 * @throws RangeError when `addresses` is empty.
 */
export function createAdmitGrpcClient(options: AdmitGrpcClientOptions): AdmitGrpcClient {
  const { addresses, scheduler, ...rest } = options;
  if (addresses.length === 0) throw new RangeError('createAdmitGrpcClient: at least one address is required');
  const clock = options.clock ?? systemClock;
  const marginMs = options.acquireMarginMs ?? 1_000;
  const instances = addresses.map((address) => {
    const connection = createGrpcConnection({ ...rest, address }, 'admission');
    return { connection, client: admissionClientOn(connection) };
  });
  const { method } = admissionV1.AdmissionService;
  const path = grpcMethodPath(method.admit);
  const serialize = serializerFor(method.admit.input);
  const deserialize = deserializerFor(method.admit.output);
  let preferred = 0;

  /** One Admit call on one instance: resolves at the reservation step; rejects with the raw error when nothing came. */
  const admitOn = (index: number, request: Parameters<AdmitService['admit']>[0]) =>
    new Promise<Admitted | AdmitRejected>((resolve, reject) => {
      const { connection, client } = instances[index];
      const leaseId = randomUUID();
      const startedAt = clock.now();
      const remainingMs = Math.max(0, request.schedule.deadlineAt - startedAt);
      const wire = create(admissionV1.AdmitRequestSchema, {
        reserve: reserveRequestToWire(request.reservation),
        acquire: acquireRequestToWire(leaseId, { ...request.schedule, caller: request.reservation.caller }, remainingMs),
      });
      const metadata = new grpc.Metadata();
      injectTraceContext(metadata, rest.propagator);
      const call = connection.calls.makeServerStreamRequest(path, serialize, deserialize, wire, metadata, { deadline: Date.now() + remainingMs + marginMs });
      let stage: 'reserve' | 'schedule' | 'done' = 'reserve';
      let reservationId = '';
      // The second step, kept until `schedule` asks for it.
      let step: { response: admissionV1.AdmitResponse['step'] } | { error: unknown } | undefined;
      let deliver: (() => void) | undefined;
      const second = (s: NonNullable<typeof step>) => {
        if (stage !== 'schedule') return;
        stage = 'done';
        step = s;
        deliver?.();
      };
      const fail = (error: unknown) => {
        if (stage === 'reserve') {
          stage = 'done';
          scheduler.releaseById(leaseId);
          reject(error);
        } else second({ error });
      };
      call.on('data', (message: admissionV1.AdmitResponse) => {
        if (stage === 'schedule') {
          second({ response: message.step });
          return;
        }
        if (stage !== 'reserve') return;
        let result: ReserveResult;
        try {
          if (message.step.case !== 'reserved') malformed('Admit did not begin with the reservation');
          result = reserveResultFromWire(message.step.value);
        } catch (error) {
          call.cancel();
          fail(error);
          return;
        }
        if (!result.ok) {
          stage = 'done';
          resolve(result);
          return;
        }
        stage = 'schedule';
        reservationId = result.reservationId;
        const releaseQuietly = () => client.release(reservationId).catch(() => undefined);
        let asked = false;
        resolve({
          ok: true,
          reservationId,
          ...(result.rateLimits ? { rateLimits: result.rateLimits } : {}),
          ...(result.reservation ? { reservation: result.reservation } : {}),
          schedule(signal) {
            if (asked) return Promise.reject(new Error('Admitted.schedule called twice'));
            asked = true;
            const onAbort = () => call.cancel();
            if (signal.aborted) call.cancel();
            else signal.addEventListener('abort', onAbort, { once: true });
            return new Promise<ScheduleResult>((resolveStep, rejectStep) => {
              deliver = () => {
                signal.removeEventListener('abort', onAbort);
                const got = step as NonNullable<typeof step>;
                if ('response' in got && got.response.case === 'scheduled') {
                  try {
                    resolveStep(acquireResultFromWire(got.response.value, (granted) => scheduler.leaseOf(leaseId, granted)));
                  } catch (error) {
                    scheduler.releaseById(leaseId);
                    void releaseQuietly();
                    rejectStep(error);
                  }
                  return;
                }
                // The call broke after the reservation: whatever it held is given back (the
                // instance does the same when it sees the call end, or died with it).
                scheduler.releaseById(leaseId);
                void releaseQuietly();
                const error = 'error' in got ? got.error : new WeirError('internal', 'Admit sent an unexpected step after the reservation');
                const queueMs = clock.now() - startedAt;
                if (signal.aborted) resolveStep({ ok: false, reason: 'cancelled', message: 'the request was cancelled while queued', queueMs });
                else if (isServiceError(error) && error.code === grpc.status.DEADLINE_EXCEEDED && weirCodeOf(error) === undefined) {
                  resolveStep({ ok: false, reason: 'deadline', message: 'the deadline passed while the request was queued', queueMs });
                } else rejectStep(error instanceof WeirError ? error : fromGrpcError(error, 'admission'));
              };
              if (step) deliver();
            });
          },
          settle: (settlement) => client.settle(reservationId, settlement),
          release: () => client.release(reservationId),
        });
      });
      call.on('error', (error: unknown) => fail(error));
      call.on('end', () => {
        // The normal end comes after both steps (stage `done`): no error object for it.
        if (stage !== 'done') fail(new WeirError('internal', stage === 'reserve' ? 'Admit ended without a reservation step' : 'Admit ended without the scheduler step'));
      });
    });

  return {
    async reserve(request) {
      let last: unknown;
      for (let i = 0; i < instances.length; i++) {
        const index = (preferred + i) % instances.length;
        const { client } = instances[index];
        let result: ReserveResult;
        try {
          result = await client.reserve(request);
        } catch (error) {
          const weir = error instanceof WeirError ? error : fromGrpcError(error, 'admission');
          if (!MOVE_ON.has(weir.code)) throw weir;
          last = weir;
          continue;
        }
        preferred = index;
        if (!result.ok) return result;
        const { reservationId } = result;
        const reserved: Reserved = {
          ok: true,
          reservationId,
          ...(result.rateLimits ? { rateLimits: result.rateLimits } : {}),
          ...(result.reservation ? { reservation: result.reservation } : {}),
          settle: (settlement) => client.settle(reservationId, settlement),
          release: () => client.release(reservationId),
        };
        return reserved;
      }
      throw last;
    },
    async admit(request) {
      let last: unknown;
      for (let i = 0; i < instances.length; i++) {
        const index = (preferred + i) % instances.length;
        try {
          const result = await admitOn(index, request);
          preferred = index;
          return result;
        } catch (error) {
          const weir = error instanceof WeirError ? error : fromGrpcError(error, 'admission');
          if (!MOVE_ON.has(weir.code)) throw weir;
          last = weir;
        }
      }
      throw last;
    },
    close() {
      for (const i of instances) i.connection.close();
    },
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
 * Admission over several instances that are stateless over one Postgres (ADR 0001's
 * per-request admission). Not for admission on leases, whose reservations live in the instance
 * that made them: there, use {@link createAdmitGrpcClient}, which binds `settle` and `release`
 * to that instance. A call
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
