import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createInMemorySemanticStore } from './in-memory-semantic-store';
import { createSemanticCacheMetrics } from './metrics';
import { createSemanticTier } from './semantic-tier';
import { answerOf, fakeEmbedder } from './test-support';

describe('createSemanticCacheMetrics', () => {
  it('exports lookups by outcome and reason and the embedding duration under the documented names, with no prompt text', async () => {
    const exporter = new PrometheusExporter({ preventServerStart: true });
    const provider = new MeterProvider({ readers: [exporter] });
    const tier = createSemanticTier({
      store: createInMemorySemanticStore(),
      embedderFor: () => fakeEmbedder('e@1', (w) => w === 'not'),
      policyFor: () => ({ enabled: true, threshold: 0.97, embeddingRevision: 'e@1' }),
      metrics: createSemanticCacheMetrics(provider.getMeter('test')),
    });
    const partition = { tenantKey: 't~0000000000000001', revisionId: 'r@1', template: '', paramsKey: 'p' };
    const q = (promptText: string, exactKey: string) => ({ partition, exactKey, promptText });
    await tier.lookup(q('is the secret door open', 'a'));
    await tier.store(q('is the secret door open', 'a'), answerOf('yes'), 60_000);
    await tier.lookup(q('is the secret door open', 'b'));
    await tier.lookup(q('is the secret door not open', 'c'));
    const { resourceMetrics } = await exporter.collect();
    const text = new PrometheusSerializer().serialize(resourceMetrics);
    expect(text).toMatch(/weir_cache_semantic_lookups_total\{[^}]*outcome="miss"[^}]*\} 1/);
    expect(text).toMatch(/weir_cache_semantic_lookups_total\{[^}]*outcome="hit"[^}]*\} 1/);
    expect(text).toMatch(/weir_cache_semantic_lookups_total\{[^}]*outcome="guarded_miss",reason="negation"[^}]*\} 1/);
    expect(text).toMatch(/weir_cache_semantic_embedding_duration_count\{[^}]*embedding_revision="e@1"[^}]*\} 3/);
    expect(text).not.toContain('secret');
    await provider.shutdown();
  });
});
