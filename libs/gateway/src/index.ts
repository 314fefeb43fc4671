export * from './app';
export * from './generation-registry';
export { HTTP_ERRORS, type HttpErrorMapping } from '@weir/streaming';
export * from './pipeline';
export * from './schemas';
export * from './sse-writer';
export * from './metrics-observer';
