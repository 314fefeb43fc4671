export * from './sticky-hash';
export * from './weighted-pick';
export * from './router';
export * from './circuit-breaker';
export * from './breaker-registry';
