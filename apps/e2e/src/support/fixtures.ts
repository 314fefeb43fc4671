import { STORIES260K_SHA256, STORIES260K_URL } from '@weir/config';
/** Shared e2e fixtures: the test configuration and keys. */

/** The demo tenant's key for e2e runs (a well-formed Weir key; test-only). */
export const DEMO_KEY = 'wk_e2edemo1_' + 'T'.repeat(43);

/**
 * Two revisions on the same tiny model: `tiny-stories` (normal speed) and
 * `tiny-stories-slow`, whose engine sleeps 40 ms after each token (the documented test-only
 * `test_token_delay_ms`), a slow producer for cancellation and deadline tests. The model is
 * named by sha256 and URL; WEIR_MODEL_PATH supplies the local file offline.
 */
export const E2E_CONFIG = `
revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 4, model_sha256: ${STORIES260K_SHA256}, model_url: '${STORIES260K_URL}' }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.10, output_per_mtok: 0.20 }
  - id: stories260k-slow@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, test_token_delay_ms: 40, model_sha256: ${STORIES260K_SHA256}, model_url: '${STORIES260K_URL}' }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 200
    pricing: { input_per_mtok: 1.5, output_per_mtok: 3.0 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
  - name: tiny-stories-slow
    revision: stories260k-slow@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 64 }
defaults:
  cancel_grace_ms: 300
  max_body_bytes: 65536
  sse_heartbeat_ms: 15000
`;
