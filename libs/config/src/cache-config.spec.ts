/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

function file(cache?: unknown, defaults?: unknown): Record<string, any> {
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
    expect(config.defaults.cache).toEqual({ exactStore: 'memory', maxBytes: 64 * 1024 * 1024, lookupTimeoutMs: 50 });
  });

  it('maps every field', () => {
    const config = parseConfig(
      JSON.stringify(
        file(
          {
            exact: { enabled: true, ttl_ms: 5_000 },
            semantic: { enabled: true, ttl_ms: 2_000, threshold: 0.95, embedding_revision: 'm@1' },
            deterministic_only: false,
            allow_opt_in: false,
            templates: ['faq', 'summary@2'],
            hit_price_fraction: 0,
            personalised_use_cases: ['coach'],
          },
          { cache: { exact_store: 'postgres', max_bytes: 2048, max_bytes_per_tenant: 1024, lookup_timeout_ms: 20 } },
        ),
      ),
      'w.json',
    );
    expect(config.tenants[0].cache).toEqual({
      exact: { enabled: true, ttlMs: 5_000 },
      semantic: { enabled: true, ttlMs: 2_000, threshold: 0.95, embeddingRevision: 'm@1' },
      deterministicOnly: false,
      allowOptIn: false,
      templates: ['faq', 'summary@2'],
      hitPriceFraction: 0,
      personalisedUseCases: ['coach'],
    });
    expect(config.defaults.cache).toEqual({ exactStore: 'postgres', maxBytes: 2048, maxBytesPerTenant: 1024, lookupTimeoutMs: 20 });
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

  it('refuses an unknown exact store', () => {
    expect(problems(file(undefined, { cache: { exact_store: 'redis' } })).join('\n')).toMatch(/defaults\.cache\.exact_store: expected memory or postgres/);
  });
});
