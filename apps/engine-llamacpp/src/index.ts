export * from './server';
export * from './slot-gate';
