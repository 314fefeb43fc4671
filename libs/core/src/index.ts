export * from './errors';
export * from './generation';
export * from './platform-config';
export * from './ports';
export * from './ids';
export * from './api-keys';
export * from './services';
export * from './async-queue';
