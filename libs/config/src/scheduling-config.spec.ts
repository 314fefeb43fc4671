/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

/** A minimal valid document with one remote revision (the split topology's shape). */
function file(): Record<string, any> {
  return {
    revisions: [
      {
        id: 'm@1',
        model: 'm',
        engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'm' },
        context_window: 4096,
        max_output_tokens: 1024,
        default_output_tokens: 256,
        pricing: { input_per_mtok: 1, output_per_mtok: 2 },
        replicas: [
          { id: 'm@1/0', base_url: 'http://127.0.0.1:8001/v1', slots: 8 },
          { id: 'm@1/1', base_url: 'http://127.0.0.1:8002/v1', slots: 8, pool: 'batch', kv_tokens: 32_768 },
          { id: 'm@1/2', base_url: 'http://127.0.0.1:8003/v1', slots: 4, pool: 'acme-dedicated' },
        ],
      },
    ],
    aliases: [{ name: 'm', revision: 'm@1' }],
    tenants: [
      { id: 'acme', name: 'Acme', dedicated_pool: 'acme-dedicated', scheduling_weight: 3 },
      { id: 'globex', name: 'Globex' },
    ],
  };
}

function problems(doc: Record<string, any>): string {
  try {
    parseConfig(JSON.stringify(doc), 'w.json');
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('scheduling configuration', () => {
  it('reads pools, KV capacity, tenant weights, dedicated pools and the scheduling defaults', () => {
    const doc = file();
    doc.defaults = { scheduling: { tenant_queue_share: 0.25, prior_decode_tokens_per_s: 40 } };
    doc.revisions[0].pool = 'interactive';
    doc.revisions[0].kv_tokens = 65_536;
    const cfg = parseConfig(JSON.stringify(doc), 'w.json');
    expect(cfg.revisions[0]).toMatchObject({ pool: 'interactive', kvTokens: 65_536 });
    expect(cfg.revisions[0].replicas).toEqual([
      { id: 'm@1/0', baseUrl: 'http://127.0.0.1:8001/v1', slots: 8 },
      { id: 'm@1/1', baseUrl: 'http://127.0.0.1:8002/v1', slots: 8, pool: 'batch', kvTokens: 32_768 },
      { id: 'm@1/2', baseUrl: 'http://127.0.0.1:8003/v1', slots: 4, pool: 'acme-dedicated' },
    ]);
    expect(cfg.tenants[0]).toMatchObject({ schedulingWeight: 3, dedicatedPool: 'acme-dedicated' });
    expect(cfg.tenants[1].schedulingWeight).toBeUndefined();
    expect(cfg.defaults.scheduling).toEqual({ maxQueueBytesPerReplica: 16_777_216, tenantQueueShare: 0.25, quantumTokens: 256, priorPrefillTokensPerS: 1_000, priorDecodeTokensPerS: 40, ewmaAlpha: 0.2, pushbackMs: 1_000, fairShareHeadroom: 0.1 });
  });

  it('reads the pushback, TPOT target and fair-share headroom settings', () => {
    const doc = file();
    doc.defaults = { scheduling: { pushback_ms: 1_000, tpot_target_ms: 45, fair_share_headroom: 0.05 } };
    expect(parseConfig(JSON.stringify(doc), 'w.json').defaults.scheduling).toMatchObject({ pushbackMs: 1_000, tpotTargetMs: 45, fairShareHeadroom: 0.05 });
    // No TPOT target unless one is named.
    expect(parseConfig(JSON.stringify(file()), 'w.json').defaults.scheduling?.tpotTargetMs).toBeUndefined();
  });

  it.each([
    ['a TPOT target of 0', (f: Record<string, any>) => (f.defaults = { scheduling: { tpot_target_ms: 0 } }), 'defaults.scheduling.tpot_target_ms: expected a number > 0 (ms), got 0'],
    ['a headroom above 0.5', (f: Record<string, any>) => (f.defaults = { scheduling: { fair_share_headroom: 0.6 } }), 'defaults.scheduling.fair_share_headroom: expected a number >= 0 and <= 0.5, got 0.6'],
    ['a pool no tenant is assigned to', (f: Record<string, any>) => (f.revisions[0].replicas[0].pool = 'nobody'), 'revisions[0].replicas[0].pool: unknown pool "nobody"'],
    ['a shared pool as a dedicated pool', (f: Record<string, any>) => (f.tenants[1].dedicated_pool = 'interactive'), 'tenants[1].dedicated_pool: "interactive" is a shared pool'],
    ['KV tokens below the context window', (f: Record<string, any>) => (f.revisions[0].replicas[1].kv_tokens = 1_000), 'revisions[0].replicas[1].kv_tokens: must be >= context_window (1000 < 4096)'],
    ['a revision KV capacity below the context window', (f: Record<string, any>) => (f.revisions[0].kv_tokens = 4_095), 'revisions[0].kv_tokens: must be >= context_window'],
    ['a weight of 0', (f: Record<string, any>) => (f.tenants[1].scheduling_weight = 0), 'tenants[1].scheduling_weight: expected a number > 0, got 0'],
    ['a tenant share above 1', (f: Record<string, any>) => (f.defaults = { scheduling: { tenant_queue_share: 1.5 } }), 'defaults.scheduling.tenant_queue_share: expected a number > 0 and <= 1, got 1.5'],
    ['a replica base_url without /v1', (f: Record<string, any>) => (f.revisions[0].replicas[0].base_url = 'http://127.0.0.1:8001'), 'revisions[0].replicas[0].base_url: expected an http:// or https:// URL ending in /v1'],
    ['an unknown scheduling key', (f: Record<string, any>) => (f.defaults = { scheduling: { quantum: 100 } }), 'defaults.scheduling.quantum: unknown key'],
  ])('reports %s with its path and what to fix', (_name, mutate, expected) => {
    const doc = file();
    mutate(doc);
    expect(problems(doc)).toContain(expected);
  });
});
