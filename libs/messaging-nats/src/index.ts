export * from './connect';
export * from './trace-headers';
export * from './usage-record-codec';
export * from './usage-stream';
export * from './nats-usage-sink';
export * from './nats-usage-source';
export * from './topic-codecs';
export * from './nats-topic';
