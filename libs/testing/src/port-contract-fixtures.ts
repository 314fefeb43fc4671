import { type AliasSpec, type Caller, DEFAULT_ADMISSION, type PlatformConfig, type RevisionSpec, type TenantSpec } from '@weir/core';

/**
 * Shared fixtures of the port contract suites (`describeRouterContract` and friends): a
 * small platform configuration whose revisions exercise every `RevisionSpec` field (the
 * llamacpp, openai-compatible and anthropic engine kinds, optional fields set and unset,
 * remote replicas) so a transport that drops a field fails the suite.
 */

/** A subject under test: the service and how to tear it down. */
export interface ContractSubject<T> {
  service: T;
  /** Stops servers, closes clients. Default: nothing to do. */
  close?(): Promise<void> | void;
}

/** Callers of the fixture tenants. */
export const contractCallers = {
  /** Tenant `acme`: may use `tiny` and `hosted`; at most 2 concurrent requests. */
  acme: { tenantId: 'acme', appId: 'acme-web', apiKeyId: 'key_acme' } satisfies Caller,
  /** Tenant `globex`: may use every alias; at most 1 concurrent request. */
  globex: { tenantId: 'globex', appId: 'globex-batch', apiKeyId: 'key_globex' } satisfies Caller,
  /** A tenant the configuration does not know. */
  stranger: { tenantId: 'nobody', appId: 'nothing', apiKeyId: 'key_none' } satisfies Caller,
};

const revisions: RevisionSpec[] = [
  {
    id: 'tiny@1',
    model: 'tiny',
    engine: {
      kind: 'llamacpp',
      modelPath: '/models/stories260K.gguf',
      modelUrl: 'https://example.invalid/stories260K.gguf',
      threads: 1,
      sequences: 4,
      contextSize: 512,
      testTokenDelayMs: 0,
    },
    contextWindow: 512,
    maxOutputTokens: 256,
    defaultOutputTokens: 64,
    pricing: { inputPerMTok: 0.1, outputPerMTok: 0.4, cachedInputPerMTok: 0.05 },
    replicas: [
      { id: 'tiny@1/0', baseUrl: 'http://10.0.0.1:8080/v1', slots: 4 },
      { id: 'tiny@1/1', baseUrl: 'http://10.0.0.2:8080/v1', slots: 2 },
    ],
  },
  {
    id: 'tiny@2',
    model: 'tiny',
    engine: {
      kind: 'openai-compatible',
      baseUrl: 'http://127.0.0.1:8000/v1',
      upstreamModel: 'tiny-2',
      apiKeyEnv: 'TINY_API_KEY',
      api: 'completions',
      firstTokenTimeoutMs: 30_000,
      idleTimeoutMs: 15_000,
      maxConcurrency: 16,
      continuousUsageStats: true,
      tokenizer: 'cl100k_base',
    },
    contextWindow: 1024,
    maxOutputTokens: 512,
    defaultOutputTokens: 128,
    pricing: { inputPerMTok: 0.15, outputPerMTok: 0.6, cachedInputPerMTok: 0.15 },
  },
  {
    id: 'hosted@1',
    model: 'hosted',
    engine: {
      kind: 'openai-compatible',
      baseUrl: 'https://api.example.invalid/v1',
      upstreamModel: 'big-model',
      api: 'chat',
      firstTokenTimeoutMs: 10_000,
      idleTimeoutMs: 10_000,
      maxConcurrency: 8,
    },
    contextWindow: 128_000,
    maxOutputTokens: 4_096,
    defaultOutputTokens: 1_024,
    pricing: { inputPerMTok: 2.5, outputPerMTok: 10, cachedInputPerMTok: 1.25 },
  },
  {
    // No alias targets it: here for the engine kind on the wire (revision round trips).
    id: 'claude@1',
    model: 'claude',
    engine: {
      kind: 'anthropic',
      baseUrl: 'https://api.anthropic.example.invalid',
      upstreamModel: 'claude-up',
      apiKeyEnv: 'ANTHROPIC_API_KEY',
      firstTokenTimeoutMs: 20_000,
      idleTimeoutMs: 12_000,
      maxConcurrency: 6,
    },
    contextWindow: 200_000,
    maxOutputTokens: 8_192,
    defaultOutputTokens: 1_024,
    pricing: { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3 },
  },
];

const aliases: AliasSpec[] = [
  {
    name: 'tiny',
    targets: [
      { revision: 'tiny@1', weight: 1 },
      { revision: 'tiny@2', weight: 1 },
    ],
    description: 'canary: half on tiny@2',
  },
  { name: 'hosted', targets: [{ revision: 'hosted@1', weight: 1 }] },
  { name: 'private', targets: [{ revision: 'tiny@1', weight: 1 }], description: 'globex only' },
];

const tenants: TenantSpec[] = [
  {
    id: 'acme',
    name: 'Acme',
    apps: [{ id: 'acme-web', name: 'web', limits: {} }],
    allowedAliases: ['tiny', 'hosted'],
    defaultDeadlineMs: 120_000,
    limits: { maxConcurrent: 2 },
  },
  {
    id: 'globex',
    name: 'Globex',
    apps: [{ id: 'globex-batch', name: 'batch', limits: {} }],
    allowedAliases: ['*'],
    defaultDeadlineMs: 60_000,
    limits: { maxConcurrent: 1 },
  },
];

/** A fresh copy of the fixture configuration (4 revisions, 3 aliases, 2 tenants). */
export function contractPlatformConfig(): PlatformConfig {
  return structuredClone({
    revisions,
    aliases,
    tenants,
    defaults: { cancelGraceMs: 50, maxBodyBytes: 1 << 20, sseHeartbeatMs: 15_000, maxQueuePerReplica: 2, admission: { ...DEFAULT_ADMISSION } },
  });
}
