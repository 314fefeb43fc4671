export * from './sse';
export * from './openai-wire';
export * from './weir-events';
export * from './responses-wire';
export * from './relay';
export * from './http-errors';
export * from './output-schema';
export { createSchemaWorker, DEFAULT_CHECK_TIMEOUT_MS, DEFAULT_COMPILE_TIMEOUT_MS, DEFAULT_MAX_QUEUED_PER_TENANT, MAX_PATTERN_PROGRAM, type SchemaWorker, type SchemaWorkerOptions, schemaWorker } from './schema-worker';
export * from './schema-dialects';
