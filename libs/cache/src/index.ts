export * from './cache-tier';
export * from './cache-key';
export * from './cache-policy';
export * from './memory-exact-tier';
export * from './response-cache';
export * from './gateway-response-cache';
export * from './policy-changes';
export * from './semantic';
