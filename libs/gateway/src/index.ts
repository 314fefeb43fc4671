export * from './app';
export * from './generation-registry';
export * from './http-errors';
export * from './pipeline';
export * from './schemas';
export * from './sse-writer';
