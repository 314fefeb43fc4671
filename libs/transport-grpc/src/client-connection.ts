/**
 * The client side every port client shares: one grpc-js channel, unary calls with a
 * deadline on every attempt, bounded retries with jittered backoff for idempotent methods
 * (as declared in the .proto with `idempotency_level`) on `UNAVAILABLE` only, trace context
 * injected into the metadata, and failures turned into `WeirError`s.
 */
import { type DescMessage, type MessageInitShape, type MessageShape, create } from '@bufbuild/protobuf';
import type { DescMethodUnary } from '@bufbuild/protobuf';
import { MethodOptions_IdempotencyLevel } from '@bufbuild/protobuf/wkt';
import * as grpc from '@grpc/grpc-js';
import type { TextMapPropagator } from '@opentelemetry/api';
import { type WeirError } from '@weir/core';
import { serverIdentityCheck, type ServiceTls } from '@weir/service-tls';
import { fromGrpcError } from './grpc-errors';
import { deserializerFor, grpcMethodPath, serializerFor } from './service-definition';
import { type CallSurface, createMuxCalls } from './mux';
import { injectTraceContext } from './trace-context';

/** Bounded retries of idempotent calls on `UNAVAILABLE`. */
export interface RetryPolicy {
  /** Attempts in total, first included (≥ 1). Default 4. */
  maxAttempts: number;
  /** Backoff before the 2nd attempt (ms); doubles each attempt. Default 100. */
  initialBackoffMs: number;
  /** Backoff cap (ms). Default 1,000. Each wait is uniform in [d/2, d] ("equal jitter"). */
  maxBackoffMs: number;
}

/** The default {@link RetryPolicy}: 4 attempts, 100 → 200 → 400 ms (jittered), at most about 0.7 s of waiting. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxAttempts: 4, initialBackoffMs: 100, maxBackoffMs: 1_000 };

/** Default per-attempt deadline of unary calls (ms). */
export const DEFAULT_UNARY_DEADLINE_MS = 2_000;

/** Options shared by every `create…GrpcClient`. */
export interface GrpcClientOptions {
  /** Server address, `host:port` (e.g. `127.0.0.1:50051` or `dns:///router:50051`). */
  address: string;
  /** Deadline of each unary attempt (ms). Default 2,000. Acquire and Generate use the request's own deadline instead. */
  deadlineMs?: number;
  /** Retry policy of idempotent calls; fields default to {@link DEFAULT_RETRY_POLICY}. */
  retry?: Partial<RetryPolicy>;
  /** Channel credentials. Default: mutual TLS with `tls` when given, else insecure (plaintext). */
  credentials?: grpc.ChannelCredentials;
  /**
   * Mutual TLS (issue 14 part 8): present this service's certificate, trust only the service CA,
   * and accept only a server whose certificate names the service this client is for (`router`,
   * `admission`, `scheduler`, `relay`) and the address's host (DNS or IP SAN). Ignored when
   * `credentials` is given.
   */
  tls?: ServiceTls;
  /**
   * grpc-js channel options, merged over Weir's defaults: reconnect backoff 100 ms → 2 s
   * (grpc's default 1 s → 120 s is too slow for an in-cluster peer that restarts) and
   * keepalive pings every 30 s with a 10 s timeout (a vanished peer ends its streams).
   */
  channelOptions?: grpc.ChannelOptions;
  /** Trace-context propagator. Default: the `@opentelemetry/api` global one. */
  propagator?: TextMapPropagator;
  /** Called when a fire-and-forget call (lease release, stop) fails after its retries. Default: ignore. */
  onBackgroundError?(error: WeirError, call: string): void;
  /**
   * Multiplex the calls on one long-lived stream (`weir.mux.v1`, see mux.ts) instead of one
   * HTTP/2 stream per call. Default true; a server without the mux is detected and served
   * plain calls. False: plain grpc-js calls only.
   */
  mux?: boolean;
}

/** Per-call overrides of {@link GrpcConnection.unary}. */
export interface UnaryCallOptions {
  /** This call's per-attempt deadline (ms). Default: the connection's. */
  deadlineMs?: number;
  /** Cancels the call (the promise rejects with the CANCELLED status as a `GrpcCallError`). */
  signal?: AbortSignal;
  /** Whether a failure may be retried. Default: the method's declared idempotency. */
  retry?: boolean;
}

/** A channel to one server with the shared call behaviour. Internal to this library. */
export interface GrpcConnection {
  readonly client: grpc.Client;
  /** Where calls are made: the mux over `client` (default), or `client` itself. */
  readonly calls: CallSurface;
  readonly options: GrpcClientOptions;
  /**
   * One unary call with deadline, retries and trace context. Resolves with the response;
   * rejects with a `WeirError` (the gRPC error as its `cause`).
   */
  unary<I extends DescMessage, O extends DescMessage>(method: DescMethodUnary<I, O>, request: MessageInitShape<I>, options?: UnaryCallOptions): Promise<MessageShape<O>>;
  /** One unary attempt without retries or error conversion: rejects with the raw `grpc.ServiceError`. */
  unaryOnce<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    request: MessageShape<I>,
    deadline: number,
    signal?: AbortSignal,
  ): Promise<MessageShape<O>>;
  /** Runs `call` without awaiting it; a failure goes to `onBackgroundError`. */
  background(name: string, call: () => Promise<unknown>): void;
  close(): void;
}

const DEFAULT_CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 2_000,
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
};

/** True for a grpc-js call error (a status with details and trailers). */
export function isServiceError(error: unknown): error is grpc.ServiceError {
  return typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'number' && 'details' in error;
}

/** The wait before attempt `attempt + 1` (ms): equal jitter over an exponential, capped. */
export function backoffMs(policy: RetryPolicy, attempt: number): number {
  const d = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** (attempt - 1));
  return d / 2 + Math.random() * (d / 2);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Channel credentials of a client of `service`: mutual TLS with `tls` (the server's certificate
 * must name `service`), else insecure.
 */
export function channelCredentials(tls: ServiceTls | undefined, service: string): grpc.ChannelCredentials {
  if (!tls) return grpc.credentials.createInsecure();
  return grpc.credentials.createSsl(tls.ca, tls.key, tls.cert, { checkServerIdentity: serverIdentityCheck(service) });
}

/** Opens a channel to `options.address`; `service` names the peer in error messages (e.g. `router`). */
export function createGrpcConnection(options: GrpcClientOptions, service: string): GrpcConnection {
  const client = new grpc.Client(options.address, options.credentials ?? channelCredentials(options.tls, service), {
    ...DEFAULT_CHANNEL_OPTIONS,
    ...options.channelOptions,
  });
  const mux = options.mux === false ? undefined : createMuxCalls(client);
  const calls: CallSurface = mux ?? (client as unknown as CallSurface);
  const policy: RetryPolicy = { ...DEFAULT_RETRY_POLICY, ...options.retry };
  const defaultDeadlineMs = options.deadlineMs ?? DEFAULT_UNARY_DEADLINE_MS;

  const unaryOnce: GrpcConnection['unaryOnce'] = (method, request, deadline, signal) =>
    new Promise((resolve, reject) => {
      const metadata = new grpc.Metadata();
      injectTraceContext(metadata, options.propagator);
      const call = calls.makeUnaryRequest(
        grpcMethodPath(method),
        serializerFor(method.input),
        deserializerFor(method.output),
        request,
        metadata,
        { deadline },
        (error, response) => {
          signal?.removeEventListener('abort', onAbort);
          if (error) reject(error);
          else resolve(response as MessageShape<typeof method.output>);
        },
      );
      const onAbort = () => call.cancel();
      if (signal?.aborted) call.cancel();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });

  const connection: GrpcConnection = {
    client,
    calls,
    options,
    unaryOnce,
    async unary(method, init, callOptions = {}) {
      const request = create(method.input, init);
      const retryable = callOptions.retry ?? method.idempotency !== MethodOptions_IdempotencyLevel.IDEMPOTENCY_UNKNOWN;
      const deadlineMs = callOptions.deadlineMs ?? defaultDeadlineMs;
      for (let attempt = 1; ; attempt++) {
        try {
          return await unaryOnce(method, request, Date.now() + deadlineMs, callOptions.signal);
        } catch (error) {
          const again =
            retryable && attempt < policy.maxAttempts && isServiceError(error) && error.code === grpc.status.UNAVAILABLE && !callOptions.signal?.aborted;
          if (!again) throw fromGrpcError(error, service);
          await sleep(backoffMs(policy, attempt));
        }
      }
    },
    background(name, call) {
      call().catch((error: unknown) => options.onBackgroundError?.(fromGrpcError(error, service), name));
    },
    close() {
      mux?.close();
      client.close();
    },
  };
  return connection;
}
