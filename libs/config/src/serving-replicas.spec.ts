import { defaultConfig } from './default-config';
import { replicaPlacement, servingReplicas } from './serving-replicas';

describe('servingReplicas', () => {
  const tiny = defaultConfig().revisions[0];
  it('uses the configured replicas', () => {
    const replicas = [{ id: 'stories260k@1/0', baseUrl: 'http://127.0.0.1:9000/v1', slots: 4 }];
    expect(servingReplicas({ ...tiny, replicas })).toBe(replicas);
  });
  it('has none for an in-process llama.cpp revision, and the upstream itself for an OpenAI-compatible one', () => {
    expect(servingReplicas(tiny)).toEqual([]);
    const upstream = {
      ...tiny,
      id: 'gpt@1',
      engine: { kind: 'openai-compatible' as const, baseUrl: 'http://127.0.0.1:8000/v1', upstreamModel: 'm', api: 'chat' as const, firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 8 },
    };
    expect(servingReplicas(upstream)).toEqual([{ id: 'gpt@1/0', baseUrl: 'http://127.0.0.1:8000/v1', slots: 8 }]);
  });
  it('has the upstream itself for an Anthropic revision', () => {
    const claude = {
      ...tiny,
      id: 'claude@1',
      engine: { kind: 'anthropic' as const, baseUrl: 'https://api.anthropic.com', upstreamModel: 'claude-sonnet-4-5', firstTokenTimeoutMs: 1, idleTimeoutMs: 1, maxConcurrency: 12 },
    };
    expect(servingReplicas(claude)).toEqual([{ id: 'claude@1/0', baseUrl: 'https://api.anthropic.com', slots: 12 }]);
  });
});

describe('replicaPlacement', () => {
  const tiny = defaultConfig().revisions[0];
  it.each([
    { label: 'no pools named: interactive, slots × context window', revision: tiny, replica: { slots: 4 }, want: { pool: 'interactive', kvTokens: 4 * 512 } },
    { label: "the revision's pool and KV tokens", revision: { ...tiny, pool: 'batch', kvTokens: 4_096 }, replica: { slots: 4 }, want: { pool: 'batch', kvTokens: 4_096 } },
    { label: "the replica's own, over the revision's", revision: { ...tiny, pool: 'batch', kvTokens: 4_096 }, replica: { slots: 4, pool: 'acme', kvTokens: 1_024 }, want: { pool: 'acme', kvTokens: 1_024 } },
  ])('$label', ({ revision, replica, want }) => {
    expect(replicaPlacement(revision, replica)).toEqual(want);
  });
});
