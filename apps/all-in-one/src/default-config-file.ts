import { STORIES260K_SHA256, STORIES260K_URL } from '@weir/config';

/**
 * The built-in default configuration (`defaultConfig()` of `@weir/config`, the same as
 * `config/weir.example.yaml`) as a configuration-file object (snake_case, what `parseConfig`
 * accepts): what the all-in-one seeds its control-plane store with when `WEIR_CONFIG` is unset.
 * A spec keeps `parseConfig` of it equal to `defaultConfig()`.
 */
export function defaultConfigFile(): Record<string, unknown> {
  return {
    revisions: [
      {
        id: 'stories260k@1',
        model: 'stories260k',
        engine: { kind: 'llamacpp', model_sha256: STORIES260K_SHA256, model_url: STORIES260K_URL, threads: 1, sequences: 4 },
        context_window: 512,
        max_output_tokens: 256,
        default_output_tokens: 128,
        pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 },
      },
      {
        id: 'stories260k-embed@1',
        model: 'stories260k',
        kind: 'embedding',
        embedding: { dimensions: 64 },
        engine: { kind: 'llamacpp', model_sha256: STORIES260K_SHA256, model_url: STORIES260K_URL, threads: 1, sequences: 2 },
        context_window: 512,
        max_output_tokens: 1,
        default_output_tokens: 1,
        pricing: { input_per_mtok: 0.02, output_per_mtok: 0 },
      },
    ],
    aliases: [
      { name: 'tiny-stories', description: "TinyStories 260K: short, simple children's stories", revision: 'stories260k@1' },
      { name: 'tiny-embed', description: 'TinyStories 260K as an embedding model (64 dimensions; weak, for tests and demos)', revision: 'stories260k-embed@1' },
    ],
    tenants: [
      {
        id: 'demo',
        name: 'Demo',
        apps: [{ id: 'demo-app', name: 'Demo app' }],
        allowed_aliases: ['*'],
        default_deadline_ms: 120_000,
        limits: { max_concurrent: 64 },
      },
    ],
    defaults: { cancel_grace_ms: 250, max_body_bytes: 1_048_576, max_body_depth: 64, sse_heartbeat_ms: 15_000, max_queue_per_replica: 256 },
  };
}
