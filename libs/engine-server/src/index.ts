export * from './server';
export * from './slot-gate';
export * from './generation-usage-log';
export * from './listen';
