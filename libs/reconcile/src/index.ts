export * from './engine-client';
export * from './usage-stream-reader';
export * from './settle-uncertain';
export * from './run-reconciliation';
export * from './budget-check';
