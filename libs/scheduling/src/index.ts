export * from './fair-queue';
export * from './estimator';
export * from './pool-scheduler';
export * from './slot-scheduler';
export * from './scheduler-metrics';
export * from './replica-prober';
export * from './capacity-telemetry';
