export * from './fair-queue';
export * from './estimator';
export * from './pool-scheduler';
export * from './slot-scheduler';
export * from './replica-prober';
