export * from './concurrency-admission';
