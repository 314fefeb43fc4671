export * from './sse';
export * from './openai-wire';
export * from './weir-events';
export * from './responses-wire';
export * from './relay';
export * from './http-errors';
export * from './output-schema';
