/**
 * The bridge from protobuf-es service descriptors to grpc-js. protoc-gen-es emits no grpc-js
 * service definitions; this builds them from the descriptors, serializing with
 * `toBinary`/`fromBinary`, so servers and clients stay typed by the generated schemas.
 */
import { type DescMessage, type DescMethod, type DescService, type MessageShape, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { GenService, GenServiceMethods } from '@bufbuild/protobuf/codegenv2';
import type * as grpc from '@grpc/grpc-js';

/** The request message type of a method descriptor. */
export type MethodInput<M extends Pick<DescMethod, 'input'>> = MessageShape<M['input']>;
/** The response message type of a method descriptor. */
export type MethodOutput<M extends Pick<DescMethod, 'output'>> = MessageShape<M['output']>;

/** A grpc-js service definition keyed by each method's `localName` (e.g. `listAliases`). */
export type GrpcServiceDefinition<S extends GenServiceMethods> = {
  [K in keyof S]: grpc.MethodDefinition<MethodInput<S[K]>, MethodOutput<S[K]>>;
};

/** The grpc-js handler type matching a method's kind. */
export type GrpcHandler<M extends Pick<DescMethod, 'input' | 'output' | 'methodKind'>> = M['methodKind'] extends 'unary'
  ? grpc.handleUnaryCall<MethodInput<M>, MethodOutput<M>>
  : M['methodKind'] extends 'server_streaming'
    ? grpc.handleServerStreamingCall<MethodInput<M>, MethodOutput<M>>
    : M['methodKind'] extends 'client_streaming'
      ? grpc.handleClientStreamingCall<MethodInput<M>, MethodOutput<M>>
      : grpc.handleBidiStreamingCall<MethodInput<M>, MethodOutput<M>>;

/** Handlers for every method of a service, keyed like {@link GrpcServiceDefinition}. */
export type GrpcServiceHandlers<S extends GenServiceMethods> = { [K in keyof S]: GrpcHandler<S[K]> };

/** The grpc-js path of a method: `/<package>.<Service>/<Method>`. */
export function grpcMethodPath(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

/** Binary serializer of a message schema, as grpc-js wants it (a Buffer). */
export function serializerFor<D extends DescMessage>(schema: D): (value: MessageShape<D>) => Buffer {
  return (value) => {
    const bytes = toBinary(schema, value);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

/** Binary deserializer of a message schema. Throws on malformed input (grpc-js answers INTERNAL). */
export function deserializerFor<D extends DescMessage>(schema: D): (bytes: Buffer) => MessageShape<D> {
  return (bytes) => fromBinary(schema, bytes);
}

/**
 * Builds the grpc-js service definition of a protobuf-es service descriptor (e.g.
 * `routerV1.RouterService`): one entry per method, keyed by `localName`, with the method's
 * path, streaming flags and binary (de)serializers. Pass it to `server.addService` with
 * {@link GrpcServiceHandlers}, or use its paths and serializers on a `grpc.Client`.
 */
export function makeGrpcServiceDefinition<S extends GenServiceMethods>(desc: GenService<S>): GrpcServiceDefinition<S>;
export function makeGrpcServiceDefinition(desc: DescService): grpc.ServiceDefinition;
export function makeGrpcServiceDefinition(desc: DescService): grpc.ServiceDefinition {
  const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const method of desc.methods) {
    definition[method.localName] = {
      path: grpcMethodPath(method),
      requestStream: method.methodKind === 'client_streaming' || method.methodKind === 'bidi_streaming',
      responseStream: method.methodKind === 'server_streaming' || method.methodKind === 'bidi_streaming',
      requestSerialize: serializerFor(method.input) as (value: unknown) => Buffer,
      requestDeserialize: deserializerFor(method.input),
      responseSerialize: serializerFor(method.output) as (value: unknown) => Buffer,
      responseDeserialize: deserializerFor(method.output),
      originalName: method.name,
    };
  }
  return definition;
}
