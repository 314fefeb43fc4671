export * from './args';
export * from './run';
