export * from './logger';
export * from './backoff';
export * from './usage-record-check';
export * from './in-process-topic';
export * from './in-process-usage-channel';
