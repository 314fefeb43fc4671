export * from './slot-scheduler';
