export * from './sticky-hash';
export * from './weighted-pick';
export * from './router';
