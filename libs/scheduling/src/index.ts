export * from './slot-scheduler';
export * from './replica-prober';
