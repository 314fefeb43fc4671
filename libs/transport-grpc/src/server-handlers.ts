/**
 * The server side every port binding shares: each handler runs in the caller's trace
 * context under a SERVER span, and any thrown value is sent as a gRPC status with the Weir
 * trailers (`toGrpcError`).
 */
import type { DescMethod, DescService } from '@bufbuild/protobuf';
import type * as grpc from '@grpc/grpc-js';
import type { TextMapPropagator } from '@opentelemetry/api';
import { toGrpcError } from './grpc-errors';
import { type GrpcServiceHandlers, grpcMethodPath, makeGrpcServiceDefinition } from './service-definition';
import { runInServerSpan } from './trace-context';
import type { GenService, GenServiceMethods } from '@bufbuild/protobuf/codegenv2';

/** Options shared by every `create…GrpcServer`. */
export interface GrpcServerBindingOptions {
  /** Trace-context propagator. Default: the `@opentelemetry/api` global one. */
  propagator?: TextMapPropagator;
}

/**
 * One service ready to be added to a grpc-js server (see `startGrpcServer`): its definition,
 * its handlers, and `close()` for state the binding holds (leases, running streams).
 */
export interface GrpcServiceBinding {
  /** Fully-qualified service name, e.g. `weir.router.v1.RouterService`. */
  readonly name: string;
  readonly definition: grpc.ServiceDefinition;
  readonly handlers: grpc.UntypedServiceImplementation;
  /** Releases what the binding holds. Called by `startGrpcServer`'s `close()`. Idempotent. */
  close(): void;
}

/** Wraps a promise-returning unary implementation as a grpc-js handler. */
export function unaryHandler<I, O>(
  method: DescMethod,
  propagator: TextMapPropagator | undefined,
  handle: (request: I, call: grpc.ServerUnaryCall<I, O>) => Promise<O>,
): grpc.handleUnaryCall<I, O> {
  const path = grpcMethodPath(method);
  return (call, callback) => {
    runInServerSpan(path, call.metadata, propagator, () => handle(call.request, call)).then(
      (response) => callback(null, response),
      (error: unknown) => callback(toGrpcError(error)),
    );
  };
}

/** Builds a {@link GrpcServiceBinding} from a service descriptor and its handlers. */
export function bindService<S extends GenServiceMethods>(
  desc: GenService<S>,
  handlers: GrpcServiceHandlers<S>,
  close: () => void = () => undefined,
): GrpcServiceBinding {
  return {
    name: desc.typeName,
    definition: makeGrpcServiceDefinition(desc as unknown as DescService),
    handlers: handlers as unknown as grpc.UntypedServiceImplementation,
    close,
  };
}
