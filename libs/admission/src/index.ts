export * from './admission-state';
export * from './admission-store';
export * from './decide';
export * from './admission';
export * from './in-memory-admission-store';
export * from './in-memory-admission';
export * from './reconciler';
