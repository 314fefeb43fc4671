export * from './env';
export * from './lifecycle';
export * from './ops-server';
export * from './ops-env';
