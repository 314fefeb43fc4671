import { defaultConfig } from './default-config';
import { servingReplicas } from './serving-replicas';

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
});
