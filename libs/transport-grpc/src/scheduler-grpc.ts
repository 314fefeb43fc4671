/**
 * `SchedulerService` over gRPC (`weir.scheduler.v1.SchedulerService`).
 *
 * Acquire is one unary call that lasts while the request is queued. The client names the
 * lease (a UUID) up front, so a lease whose grant never reached the client (cancelled,
 * deadline, broken connection) can still be released by id: the client sends Release after
 * any failed Acquire, and the server releases a grant for a call that was already
 * cancelled, or for an id that was released before it was granted.
 */
import { randomUUID } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  type Caller,
  type Clock,
  type LeaseUsageReport,
  type RequestPriority,
  type ScheduleRejectReason,
  type ScheduleRequest,
  type ScheduleResult,
  type SchedulerService,
  type SlotLease,
  WeirError,
  systemClock,
} from '@weir/core';
import { schedulerV1 } from '@weir/proto';
import { type GrpcClientOptions, createGrpcConnection, isServiceError } from './client-connection';
import { fromGrpcError, weirCodeOf } from './grpc-errors';
import { type GrpcServerBindingOptions, type GrpcServiceBinding, bindService, unaryHandler } from './server-handlers';
import { callerFromWire, callerToWire, enumFromWire, malformed } from './wire-common';

const REJECT_REASONS: Record<ScheduleRejectReason, schedulerV1.RejectReason> = {
  queue_full: schedulerV1.RejectReason.QUEUE_FULL,
  deadline: schedulerV1.RejectReason.DEADLINE,
  cancelled: schedulerV1.RejectReason.CANCELLED,
  no_replica: schedulerV1.RejectReason.NO_REPLICA,
  deadline_unmeetable: schedulerV1.RejectReason.DEADLINE_UNMEETABLE,
  shed: schedulerV1.RejectReason.SHED,
};

const PRIORITIES: Record<RequestPriority, schedulerV1.Priority> = {
  interactive: schedulerV1.Priority.INTERACTIVE,
  batch: schedulerV1.Priority.BATCH,
};

function reportToWire(report: LeaseUsageReport): schedulerV1.UsageReport {
  return create(schedulerV1.UsageReportSchema, {
    inputTokens: report.inputTokens,
    outputTokens: report.outputTokens,
    ...(report.ttftMs !== null ? { ttftMs: report.ttftMs } : {}),
    durationMs: report.durationMs,
  });
}

function reportFromWire(report: schedulerV1.UsageReport): LeaseUsageReport {
  return { inputTokens: report.inputTokens, outputTokens: report.outputTokens, ttftMs: report.ttftMs ?? null, durationMs: report.durationMs };
}

/** Options of {@link createSchedulerGrpcServer}. */
export interface SchedulerGrpcServerOptions extends GrpcServerBindingOptions {
  /** The clock `impl` measures deadlines on; Acquire's `deadline_in_ms` is rebased on it. Default `systemClock`. */
  clock?: Clock;
  /** How long a Release for a lease id not (yet) granted is remembered (ms). Default 60,000. */
  earlyReleaseTtlMs?: number;
}

/** The scheduler binding plus what it holds, for metrics and tests. */
export interface SchedulerGrpcServerBinding extends GrpcServiceBinding {
  /** Leases granted over gRPC and not yet released. */
  heldLeases(): number;
  /** Acquire calls currently waiting in `impl`. */
  waiting(): number;
}

/** The scheduler gRPC client: the port plus `close()` for its channel. */
export interface SchedulerGrpcClient extends SchedulerService {
  /**
   * `acquire` under a lease id the caller chose (unique per call): an admission instance acquires
   * for a gateway (`Admit`) under the gateway's id, so the gateway can release the slot itself.
   */
  acquireAs(leaseId: string, request: ScheduleRequest): Promise<ScheduleResult>;
  /**
   * A lease another process acquired under `leaseId` (an `Admit` answer): `release()` sends
   * Release to the scheduler in the background, once.
   */
  leaseOf(leaseId: string, granted: { replicaId: string; queueMs: number }): SlotLease;
  /** Sends Release for `leaseId` in the background: frees it if granted, or makes a later grant of it release itself. */
  releaseById(leaseId: string): void;
  /** Closes the channel; later calls fail. Leases still held are not released. */
  close(): void;
}

/** An Acquire request as the scheduler gets it (the caller's deadline as the time left, ms). */
export function acquireRequestToWire(leaseId: string, request: Omit<ScheduleRequest, 'signal'>, remainingMs: number): schedulerV1.AcquireRequest {
  return create(schedulerV1.AcquireRequestSchema, {
    leaseId,
    caller: callerToWire(request.caller),
    revisionId: request.revisionId,
    tokens: request.tokens,
    deadlineInMs: Math.max(0, remainingMs),
    avoidReplicas: request.avoidReplicas ? [...request.avoidReplicas] : [],
    inputTokens: request.inputTokens ?? 0,
    priority: PRIORITIES[request.priority ?? 'interactive'],
    bytes: BigInt(Math.max(0, Math.round(request.bytes ?? 0))),
    ...(request.affinityKey !== undefined ? { affinityKey: request.affinityKey } : {}),
  });
}

/**
 * An Acquire request → the port's request, its deadline rebased on `clock`; `caller` replaces
 * the request's own when given (Admit's acquire may leave it unset).
 */
export function acquireRequestFromWire(request: schedulerV1.AcquireRequest, clock: Clock, signal: AbortSignal, caller?: Caller): ScheduleRequest {
  return {
    caller: caller ?? callerFromWire(request.caller),
    revisionId: request.revisionId,
    tokens: request.tokens,
    deadlineAt: clock.now() + Math.max(0, request.deadlineInMs),
    signal,
    ...(request.avoidReplicas.length > 0 ? { avoidReplicas: [...request.avoidReplicas] } : {}),
    inputTokens: request.inputTokens,
    priority: request.priority === schedulerV1.Priority.BATCH ? 'batch' : 'interactive',
    ...(request.bytes > 0n ? { bytes: Number(request.bytes) } : {}),
    ...(request.affinityKey !== undefined ? { affinityKey: request.affinityKey } : {}),
  };
}

/** The port's result → an Acquire answer under `leaseId` (a grant's lease is kept by the caller). */
export function acquireResultToWire(leaseId: string, result: ScheduleResult): schedulerV1.AcquireResponse {
  if (result.ok) return create(schedulerV1.AcquireResponseSchema, { result: { case: 'lease', value: { leaseId, replicaId: result.lease.replicaId, queueMs: result.lease.queueMs } } });
  return create(schedulerV1.AcquireResponseSchema, {
    result: {
      case: 'rejection',
      value: {
        reason: REJECT_REASONS[result.reason],
        message: result.message,
        queueMs: result.queueMs,
        ...(result.retryAfterMs !== undefined ? { retryAfterMs: result.retryAfterMs } : {}),
      },
    },
  });
}

/**
 * An Acquire answer → the port's result; a grant becomes `lease(granted)` (the caller decides
 * how it is released). `invalid_request` when the answer has neither case.
 */
export function acquireResultFromWire(response: schedulerV1.AcquireResponse, lease: (granted: { replicaId: string; queueMs: number }) => SlotLease): ScheduleResult {
  switch (response.result.case) {
    case 'lease':
      return { ok: true, lease: lease({ replicaId: response.result.value.replicaId, queueMs: response.result.value.queueMs }) };
    case 'rejection': {
      const r = response.result.value;
      return {
        ok: false,
        reason: enumFromWire(REJECT_REASONS, r.reason, 'rejection.reason'),
        message: r.message,
        queueMs: r.queueMs,
        ...(r.retryAfterMs !== undefined ? { retryAfterMs: r.retryAfterMs } : {}),
      };
    }
    case undefined:
      return malformed('AcquireResponse.result is missing');
  }
}

/** Options of {@link createSchedulerGrpcClient}. */
export interface SchedulerGrpcClientOptions extends GrpcClientOptions {
  /** The clock `ScheduleRequest.deadlineAt` is on. Default `systemClock`. */
  clock?: Clock;
  /**
   * Acquire's call deadline is the request's own deadline plus this margin (ms), so the
   * scheduler's `deadline` answer arrives before the transport gives up. Default 1,000.
   */
  acquireMarginMs?: number;
}

const MAX_EARLY_RELEASES = 10_000;

/**
 * Hosts `impl` as `weir.scheduler.v1.SchedulerService`. A cancelled Acquire (the client left,
 * or its deadline fired) aborts the `signal` handed to `impl`, so the waiter leaves the
 * queue; a slot granted to a call that was already cancelled is released at once. Leases
 * are held by id until Release (idempotent). `close()` releases every held lease.
 */
export function createSchedulerGrpcServer(impl: SchedulerService, options: SchedulerGrpcServerOptions = {}): SchedulerGrpcServerBinding {
  const clock = options.clock ?? systemClock;
  const ttlMs = options.earlyReleaseTtlMs ?? 60_000;
  const leases = new Map<string, SlotLease>();
  const pending = new Map<string, AbortController>();
  // Lease ids released before they were granted (insertion-ordered, so pruning is from the front).
  const earlyReleases = new Map<string, number>();

  const rememberEarlyRelease = (leaseId: string) => {
    const now = clock.now();
    for (const [id, at] of earlyReleases) {
      if (now - at < ttlMs && earlyReleases.size < MAX_EARLY_RELEASES) break;
      earlyReleases.delete(id);
    }
    earlyReleases.set(leaseId, now);
  };

  const { method } = schedulerV1.SchedulerService;
  const binding = bindService(
    schedulerV1.SchedulerService,
    {
      acquire: unaryHandler(method.acquire, options.propagator, async (request, call) => {
        const leaseId = request.leaseId;
        if (leaseId.length === 0) malformed('lease_id is empty');
        if (leases.has(leaseId) || pending.has(leaseId)) throw new WeirError('conflict', `lease id ${leaseId} is already in use`);
        const abort = new AbortController();
        const onCancelled = () => abort.abort();
        call.once('cancelled', onCancelled);
        if (call.cancelled || earlyReleases.delete(leaseId)) abort.abort();
        pending.set(leaseId, abort);
        let result: ScheduleResult;
        try {
          result = await impl.acquire(acquireRequestFromWire(request, clock, abort.signal));
        } finally {
          pending.delete(leaseId);
          call.removeListener('cancelled', onCancelled);
        }
        if (result.ok) {
          if (call.cancelled || abort.signal.aborted || earlyReleases.delete(leaseId)) {
            // Nobody will use this slot: the caller left before the grant reached it.
            result.lease.release();
            return create(schedulerV1.AcquireResponseSchema, {
              result: { case: 'rejection', value: { reason: schedulerV1.RejectReason.CANCELLED, message: 'the request was cancelled', queueMs: result.lease.queueMs } },
            });
          }
          leases.set(leaseId, result.lease);
        }
        return acquireResultToWire(leaseId, result);
      }),
      release: unaryHandler(method.release, options.propagator, async (request) => {
        const lease = leases.get(request.leaseId);
        if (lease) {
          leases.delete(request.leaseId);
          lease.release(request.report ? reportFromWire(request.report) : undefined);
        } else {
          rememberEarlyRelease(request.leaseId);
          pending.get(request.leaseId)?.abort();
        }
        return create(schedulerV1.ReleaseResponseSchema);
      }),
    },
    () => {
      for (const abort of pending.values()) abort.abort();
      for (const lease of leases.values()) lease.release();
      leases.clear();
    },
  );
  return { ...binding, heldLeases: () => leases.size, waiting: () => pending.size };
}

/**
 * A scheduler client over gRPC. `acquire` waits as long as the request is queued: the call's
 * deadline is `deadlineAt` plus `acquireMarginMs`, and `request.signal` cancels it (answering
 * `cancelled`, as in-process). It is never retried. A granted lease's `release()` sends
 * Release in the background (idempotent, retried on `UNAVAILABLE`; a final failure goes to
 * `onBackgroundError`). Transport failures reject with a `WeirError`
 * (`upstream_unavailable`, `internal`, …) after releasing whatever the call may have been granted.
 */
export function createSchedulerGrpcClient(options: SchedulerGrpcClientOptions): SchedulerGrpcClient {
  const connection = createGrpcConnection(options, 'scheduler');
  const clock = options.clock ?? systemClock;
  const marginMs = options.acquireMarginMs ?? 1_000;
  const { method } = schedulerV1.SchedulerService;

  const releaseInBackground = (leaseId: string, report?: LeaseUsageReport) =>
    connection.background('scheduler.Release', () => connection.unary(method.release, { leaseId, ...(report ? { report: reportToWire(report) } : {}) }));

  const leaseOf = (leaseId: string, granted: { replicaId: string; queueMs: number }): SlotLease => {
    let released = false;
    return {
      replicaId: granted.replicaId,
      queueMs: granted.queueMs,
      release(report) {
        if (released) return;
        released = true;
        releaseInBackground(leaseId, report);
      },
    };
  };

  const acquireAs = async (leaseId: string, request: ScheduleRequest): Promise<ScheduleResult> => {
    if (request.signal.aborted) return { ok: false, reason: 'cancelled', message: 'the request was cancelled', queueMs: 0 };
    const startedAt = clock.now();
    const remainingMs = Math.max(0, request.deadlineAt - startedAt);
    let response: schedulerV1.AcquireResponse;
    try {
      response = await connection.unaryOnce(method.acquire, acquireRequestToWire(leaseId, request, remainingMs), Date.now() + remainingMs + marginMs, request.signal);
    } catch (error) {
      // The call may have reached the scheduler and been granted: give the slot back.
      releaseInBackground(leaseId);
      const queueMs = clock.now() - startedAt;
      if (request.signal.aborted) return { ok: false, reason: 'cancelled', message: 'the request was cancelled while queued', queueMs };
      if (isServiceError(error) && error.code === grpc.status.DEADLINE_EXCEEDED && weirCodeOf(error) === undefined) {
        return { ok: false, reason: 'deadline', message: 'the deadline passed while the request was queued', queueMs };
      }
      throw fromGrpcError(error, 'scheduler');
    }
    if (response.result.case === undefined) releaseInBackground(leaseId);
    return acquireResultFromWire(response, (granted) => leaseOf(leaseId, granted));
  };

  return {
    acquire: (request) => acquireAs(randomUUID(), request),
    acquireAs,
    leaseOf,
    releaseById: (leaseId) => releaseInBackground(leaseId),
    close: () => connection.close(),
  };
}
