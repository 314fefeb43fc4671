/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

function file(cache?: unknown, defaults?: unknown): Record<string, any> {
  return {
    revisions: [
      {
        id: 'e@1',
        model: 'e',
        kind: 'embedding',
        embedding: { dimensions: 8 },
        engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'e' },
        context_window: 512,
        max_output_tokens: 1,
        default_output_tokens: 1,
        pricing: { input_per_mtok: 1, output_per_mtok: 0 },
      },
      {
        id: 'm@1',
        model: 'm',
        engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'm' },
        context_window: 4096,
        max_output_tokens: 1024,
        default_output_tokens: 256,
        pricing: { input_per_mtok: 1, output_per_mtok: 2 },
      },
    ],
    aliases: [{ name: 'm', revision: 'm@1' }],
    tenants: [{ id: 'acme', name: 'Acme', ...(cache !== undefined ? { cache } : {}) }],
    ...(defaults !== undefined ? { defaults } : {}),
  };
}

function problems(doc: Record<string, any>): string[] {
  try {
    parseConfig(JSON.stringify(doc), 'w.json');
  } catch (err) {
    if (err instanceof ConfigError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  return [];
}

describe('tenant cache policy', () => {
  it('maps an enabled policy with its defaults', () => {
    const config = parseConfig(JSON.stringify(file({ exact: { enabled: true } })), 'w.json');
    expect(config.tenants[0].cache).toEqual({ exact: { enabled: true, ttlMs: 600_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 });
    expect(config.defaults.cache).toEqual({ exactStore: 'memory', maxBytes: 64 * 1024 * 1024, lookupTimeoutMs: 50, semanticStore: 'memory', semanticLookupTimeoutMs: 250 });
  });

  it('maps every field', () => {
    const config = parseConfig(
      JSON.stringify(
        file(
          {
            exact: { enabled: true, ttl_ms: 5_000 },
            semantic: { enabled: true, ttl_ms: 2_000, threshold: 0.95, embedding_revision: 'e@1' },
            deterministic_only: false,
            allow_opt_in: false,
            templates: ['faq', 'summary@2'],
            hit_price_fraction: 0,
            personalised_use_cases: ['coach'],
          },
          { cache: { exact_store: 'postgres', max_bytes: 2048, max_bytes_per_tenant: 1024, lookup_timeout_ms: 20, semantic_store: 'memory', semantic_lookup_timeout_ms: 120 } },
        ),
      ),
      'w.json',
    );
    expect(config.tenants[0].cache).toEqual({
      exact: { enabled: true, ttlMs: 5_000 },
      semantic: { enabled: true, ttlMs: 2_000, threshold: 0.95, embeddingRevision: 'e@1' },
      deterministicOnly: false,
      allowOptIn: false,
      templates: ['faq', 'summary@2'],
      hitPriceFraction: 0,
      personalisedUseCases: ['coach'],
    });
    expect(config.defaults.cache).toEqual({ exactStore: 'postgres', maxBytes: 2048, maxBytesPerTenant: 1024, lookupTimeoutMs: 20, semanticStore: 'memory', semanticLookupTimeoutMs: 120 });
  });

  it('carries no policy when every tier is off or there is no section', () => {
    expect(parseConfig(JSON.stringify(file({ exact: { enabled: false }, hit_price_fraction: 0.5 })), 'w.json').tenants[0].cache).toBeUndefined();
    expect(parseConfig(JSON.stringify(file()), 'w.json').tenants[0].cache).toBeUndefined();
  });

  it.each([
    [{ exact: { enabled: true, ttl_ms: 10 } }, /tenants\[0\]\.cache\.exact\.ttl_ms: expected an integer from 1000 to 2592000000/],
    [{ exact: { enabled: 'yes' } }, /cache\.exact\.enabled: expected true or false/],
    [{ exact: { enabled: true }, hit_price_fraction: 2 }, /cache\.hit_price_fraction: expected a number from 0 to 1/],
    [{ exact: { enabled: true }, templates: ['bad name'] }, /cache\.templates\[0\]: expected a template name or name@version/],
    [{ exact: { enabled: true }, personalised_use_cases: ['has space'] }, /cache\.personalised_use_cases\[0\]/],
    [{ exact: { enabled: true }, ttl: 5 }, /tenants\[0\]\.cache\.ttl: unknown key/],
  ])('refuses %j with a clear problem', (cache, problem) => {
    expect(problems(file(cache)).join('\n')).toMatch(problem);
  });

  it('gives a semantic policy its defaults: the exact TTL when the exact tier is on, else 1 h; threshold 0.97', () => {
    const withExact = parseConfig(JSON.stringify(file({ exact: { enabled: true, ttl_ms: 30_000 }, semantic: { enabled: true, embedding_revision: 'e@1' } })), 'w.json');
    expect(withExact.tenants[0].cache?.semantic).toEqual({ enabled: true, ttlMs: 30_000, threshold: 0.97, embeddingRevision: 'e@1' });
    const alone = parseConfig(JSON.stringify(file({ semantic: { enabled: true, embedding_revision: 'e@1' } })), 'w.json');
    expect(alone.tenants[0].cache).toMatchObject({ exact: { enabled: false }, semantic: { enabled: true, ttlMs: 3_600_000, threshold: 0.97 } });
    // The semantic store follows the exact store unless named.
    expect(parseConfig(JSON.stringify(file(undefined, { cache: { exact_store: 'postgres' } })), 'w.json').defaults.cache?.semanticStore).toBe('postgres');
  });

  it.each([
    [{ semantic: { enabled: true, embedding_revision: 'e@1', threshold: 0.9 } }, /tenants\[0\]\.cache\.semantic\.threshold: 0\.9 is below the floor of 0\.95/],
    [{ semantic: { enabled: true, embedding_revision: 'e@1', threshold: 1.2 } }, /tenants\[0\]\.cache\.semantic\.threshold: 1\.2 is above 1/],
    [{ semantic: { enabled: true } }, /tenants\[0\]\.cache\.semantic\.embedding_revision: required when the semantic cache is enabled/],
    [{ semantic: { enabled: true, embedding_revision: 'nope@1' } }, /tenants\[0\]\.cache\.semantic\.embedding_revision: no revision 'nope@1'/],
    [{ semantic: { enabled: true, embedding_revision: 'm@1' } }, /tenants\[0\]\.cache\.semantic\.embedding_revision: revision 'm@1' is a generation model/],
    [{ semantic: { enabled: true, embedding_revision: 'e@1', ttl_ms: 10 } }, /tenants\[0\]\.cache\.semantic\.ttl_ms: expected an integer from 1000/],
    [{ semantic: { enabled: true, embedding_revision: 'e@1', radius: 1 } }, /tenants\[0\]\.cache\.semantic\.radius: unknown key/],
  ])('refuses the semantic policy %j naming its field', (cache, problem) => {
    expect(problems(file(cache)).join('\n')).toMatch(problem);
  });

  it('refuses an unknown exact store', () => {
    expect(problems(file(undefined, { cache: { exact_store: 'redis' } })).join('\n')).toMatch(/defaults\.cache\.exact_store: expected memory or postgres/);
  });
});
