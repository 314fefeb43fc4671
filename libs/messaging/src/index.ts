export * from './logger';
export * from './in-process-topic';
export * from './in-process-usage-channel';
