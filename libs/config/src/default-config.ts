import path from 'node:path';
import { DEFAULT_ADMISSION, DEFAULT_CACHE, DEFAULT_CIRCUIT_BREAKER, DEFAULT_SCHEDULING, type PlatformConfig } from '@weir/core';

/**
 * The built-in default configuration, used when `WEIR_CONFIG` is unset. It is the same
 * configuration as `config/weir.example.yaml` (a test keeps the two equal).
 */

/** sha256 (hex) of `stories260K.gguf`, from `../shared/models/README.md`. */
export const STORIES260K_SHA256 = '270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d';
/** Size of `stories260K.gguf` in bytes (1.13 MiB), from `../shared/models/README.md`. */
export const STORIES260K_SIZE_BYTES = 1_185_376;
/** Public download URL of `stories260K.gguf` (the copy llama.cpp's CI uses). */
export const STORIES260K_URL = 'https://huggingface.co/ggml-org/models-moved/resolve/main/tinyllamas/stories260K.gguf';

/** Options of {@link defaultConfig}. */
export interface DefaultConfigOptions {
  /**
   * Local path of the GGUF file (made absolute against the working directory). When unset the
   * engine names only the sha256 and download URL, and `resolveModelFile` finds or fetches it.
   */
  modelPath?: string;
}

/**
 * Returns a fresh copy of the default configuration:
 * - revision `stories260k@1` (model `stories260k`, llama.cpp, 1 thread, 4 sequences,
 *   context window 512 tokens (the length the model was trained at), max output 256 tokens,
 *   default output 128 tokens, example prices $0.10 input / $0.20 output per million tokens);
 * - alias `tiny-stories` → that revision (weight 1);
 * - revision `stories260k-embed@1` (the same GGUF as an embedding model: `kind: embedding`,
 *   64 dimensions, llama.cpp embedding context of 512 tokens, 1 thread, 2 slots; $0.02 per
 *   million input tokens) and alias `tiny-embed` → it: a real, if weak, model for
 *   `/v1/embeddings` and the semantic cache;
 * - tenant `demo` with app `demo-app`, allowed every alias, 120 s default deadline, 64
 *   concurrent requests;
 * - defaults: 250 ms cancel grace, 1 MiB bodies nested at most 64 deep, 15 s SSE heartbeats, 256 queued per replica,
 *   the scheduling defaults (`DEFAULT_SCHEDULING`); every replica in the `interactive` pool.
 */
export function defaultConfig(options: DefaultConfigOptions = {}): PlatformConfig {
  return {
    revisions: [
      {
        id: 'stories260k@1',
        model: 'stories260k',
        engine: {
          kind: 'llamacpp',
          ...(options.modelPath !== undefined ? { modelPath: path.resolve(options.modelPath) } : {}),
          modelSha256: STORIES260K_SHA256,
          modelUrl: STORIES260K_URL,
          threads: 1,
          sequences: 4,
          contextSize: 512,
          testTokenDelayMs: 0,
        },
        contextWindow: 512,
        maxOutputTokens: 256,
        defaultOutputTokens: 128,
        pricing: { inputPerMTok: 0.1, outputPerMTok: 0.2, cachedInputPerMTok: 0.1, cacheWriteInputPerMTok: 0.1, reasoningPerMTok: 0.2 },
      },
      {
        id: 'stories260k-embed@1',
        model: 'stories260k',
        engine: {
          kind: 'llamacpp',
          ...(options.modelPath !== undefined ? { modelPath: path.resolve(options.modelPath) } : {}),
          modelSha256: STORIES260K_SHA256,
          modelUrl: STORIES260K_URL,
          threads: 1,
          sequences: 2,
          contextSize: 512,
          testTokenDelayMs: 0,
        },
        kind: 'embedding',
        embedding: { dimensions: 64, variableDimensions: false },
        contextWindow: 512,
        maxOutputTokens: 1,
        defaultOutputTokens: 1,
        pricing: { inputPerMTok: 0.02, outputPerMTok: 0, cachedInputPerMTok: 0.02, cacheWriteInputPerMTok: 0.02, reasoningPerMTok: 0 },
      },
    ],
    aliases: [
      { name: 'tiny-stories', targets: [{ revision: 'stories260k@1', weight: 1 }], description: 'TinyStories 260K: short, simple children\'s stories' },
      { name: 'tiny-embed', targets: [{ revision: 'stories260k-embed@1', weight: 1 }], description: 'TinyStories 260K as an embedding model (64 dimensions; weak, for tests and demos)' },
    ],
    tenants: [
      {
        id: 'demo',
        name: 'Demo',
        apps: [{ id: 'demo-app', name: 'Demo app', limits: {} }],
        allowedAliases: ['*'],
        defaultDeadlineMs: 120_000,
        limits: { maxConcurrent: 64 },
      },
    ],
    defaults: { cancelGraceMs: 250, maxBodyBytes: 1024 * 1024, maxBodyDepth: 64, sseHeartbeatMs: 15_000, maxQueuePerReplica: 256, scheduling: { ...DEFAULT_SCHEDULING }, admission: { ...DEFAULT_ADMISSION }, circuitBreaker: { ...DEFAULT_CIRCUIT_BREAKER }, cache: { ...DEFAULT_CACHE } },
  };
}
