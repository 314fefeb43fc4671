export * from './env';
export * from './lifecycle';
export * from './ops-server';
export * from './ops-env';
export * from './client-limits';
export * from './client-guard';
export * from './auth-throttle';
