export * from './cache-tier';
export * from './semantic';
