export * from './paths';
export * from './scripted-upstream';
export * from './engine-contract';
export * from './usage-records';
export * from './topic-contract';
export * from './usage-channel-contract';
export * from './private-nats';
