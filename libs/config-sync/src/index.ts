/**
 * Signed configuration snapshots (docs/config-snapshots.md): Ed25519 keys, the signed envelope
 * and its payloads, the bucket port (in memory and NATS JetStream KV), the control plane's
 * publisher and the data plane's subscriber with last-good cold starts and bounded staleness.
 */
export * from './keys';
export * from './envelope';
export * from './bucket';
export * from './nats-config-bucket';
export * from './logger';
export * from './publisher';
export * from './subscriber';
export * from './metrics';
export * from './data-plane-config';
