/**
 * gRPC adapters for the data-plane ports (issue 3, the split topology): for each of
 * `RouterService`, `AdmissionService`, `SchedulerService` and `RelayService` a server
 * binding wrapping any implementation and a client implementing the port, plus the
 * protobuf-es → grpc-js bridge, the Weir error ↔ gRPC status table, W3C trace-context
 * propagation and `startGrpcServer`. See README.md.
 */
export {
  makeGrpcServiceDefinition,
  grpcMethodPath,
  serializerFor,
  deserializerFor,
  type GrpcServiceDefinition,
  type GrpcServiceHandlers,
  type GrpcHandler,
  type MethodInput,
  type MethodOutput,
} from './service-definition';
export {
  GRPC_STATUS_BY_WEIR_CODE,
  WEIR_ERROR_CODE_KEY,
  WEIR_ERROR_DETAIL_KEY,
  toGrpcError,
  fromGrpcError,
  weirCodeOf,
  isWeirErrorCode,
} from './grpc-errors';
export { DEFAULT_RETRY_POLICY, DEFAULT_UNARY_DEADLINE_MS, channelCredentials, type GrpcClientOptions, type RetryPolicy } from './client-connection';
export { type GrpcServerBindingOptions, type GrpcServiceBinding } from './server-handlers';
export { startGrpcServer, serverCredentials, type StartGrpcServerOptions, type RunningGrpcServer } from './grpc-server';
export { injectTraceContext, extractTraceContext, metadataGetter, metadataSetter, tracingActive } from './trace-context';
export { installTracing, type InstallTracingOptions, type InstalledTracing } from './install-tracing';
export {
  createRouterGrpcServer,
  createRouterGrpcClient,
  type RouterGrpcClient,
} from './router-grpc';
export {
  createAdmissionGrpcServer,
  createAdmissionGrpcClient,
  createAdmissionFailoverClient,
  createAdmitGrpcClient,
  type AdmissionGrpcClient,
  type AdmissionGrpcServerOptions,
  type AdmissionFailoverOptions,
  type AdmitGrpcClient,
  type AdmitGrpcClientOptions,
  type AdmitScheduler,
} from './admission-grpc';
export {
  createSchedulerGrpcServer,
  createSchedulerGrpcClient,
  type SchedulerGrpcServerOptions,
  type SchedulerGrpcServerBinding,
  type SchedulerGrpcClient,
  type SchedulerGrpcClientOptions,
} from './scheduler-grpc';
export {
  createRelayGrpcServer,
  createRelayGrpcClient,
  isRelayLost,
  type RelayLostOutcome,
  type RelayGrpcServerOptions,
  type RelayGrpcServerBinding,
  type RelayGrpcClient,
  type RelayGrpcClientOptions,
} from './relay-grpc';
