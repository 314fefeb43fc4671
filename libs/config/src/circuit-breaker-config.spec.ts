/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { DEFAULT_CIRCUIT_BREAKER } from '@weir/core';
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

function file(circuitBreaker?: unknown): Record<string, any> {
  return {
    revisions: [
      {
        id: 'chat@1',
        model: 'chat',
        engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'chat' },
        context_window: 4096,
        max_output_tokens: 1024,
        default_output_tokens: 256,
        pricing: { input_per_mtok: 1, output_per_mtok: 2 },
      },
    ],
    ...(circuitBreaker !== undefined ? { defaults: { circuit_breaker: circuitBreaker } } : {}),
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

describe('defaults.circuit_breaker', () => {
  it('takes DEFAULT_CIRCUIT_BREAKER when absent or empty, the latency trigger included', () => {
    const expected = { windowMs: 10_000, errorRate: 0.2, minRequests: 20, openMs: 5_000, halfOpenProbes: 3, slowCallMs: 10_000, slowCallRate: 0.8 };
    expect(DEFAULT_CIRCUIT_BREAKER).toEqual(expected);
    expect(parseConfig(JSON.stringify(file()), 'w.json').defaults.circuitBreaker).toEqual(expected);
    expect(parseConfig(JSON.stringify(file({})), 'w.json').defaults.circuitBreaker).toEqual(expected);
    expect(parseConfig(JSON.stringify(file(null)), 'w.json').defaults.circuitBreaker).toEqual(expected);
  });

  it('reads every setting, snake_case to camelCase', () => {
    const cfg = parseConfig(
      JSON.stringify(file({ window_ms: 30_000, error_rate: 0.5, min_requests: 5, open_ms: 0, half_open_probes: 1, slow_call_ms: 2_500, slow_call_rate: 1 })),
      'w.json',
    );
    expect(cfg.defaults.circuitBreaker).toEqual({ windowMs: 30_000, errorRate: 0.5, minRequests: 5, openMs: 0, halfOpenProbes: 1, slowCallMs: 2_500, slowCallRate: 1 });
  });

  it('turns the latency trigger off with slow_call_ms: null', () => {
    const cb = parseConfig(JSON.stringify(file({ slow_call_ms: null })), 'w.json').defaults.circuitBreaker;
    expect(cb).toBeDefined();
    expect(cb && 'slowCallMs' in cb).toBe(false);
    expect(cb?.errorRate).toBe(0.2);
  });

  it.each([
    [{ error_rate: 0 }, 'defaults.circuit_breaker.error_rate', 'expected a number > 0 and <= 1, got 0'],
    [{ error_rate: 1.5 }, 'defaults.circuit_breaker.error_rate', 'expected a number > 0 and <= 1, got 1.5'],
    [{ slow_call_rate: -0.1 }, 'defaults.circuit_breaker.slow_call_rate', 'expected a number > 0 and <= 1'],
    [{ window_ms: 50 }, 'defaults.circuit_breaker.window_ms', 'expected an integer >= 100, got 50'],
    [{ min_requests: 0 }, 'defaults.circuit_breaker.min_requests', 'expected an integer >= 1, got 0'],
    [{ min_requests: 2.5 }, 'defaults.circuit_breaker.min_requests', 'expected an integer >= 1'],
    [{ open_ms: -1 }, 'defaults.circuit_breaker.open_ms', 'expected an integer >= 0, got -1'],
    [{ half_open_probes: 0 }, 'defaults.circuit_breaker.half_open_probes', 'expected an integer >= 1, got 0'],
    [{ slow_call_ms: 0 }, 'defaults.circuit_breaker.slow_call_ms', 'expected an integer >= 1, got 0'],
    [{ slow_call_ms: '10s' }, 'defaults.circuit_breaker.slow_call_ms', 'expected an integer >= 1'],
  ])('refuses %j', (section, path, message) => {
    const text = problems(file(section));
    expect(text).toContain(path);
    expect(text).toContain(message);
  });

  it('refuses an unknown key, naming the close one', () => {
    const text = problems(file({ error_rate_threshold: 0.3 }));
    expect(text).toContain('defaults.circuit_breaker');
    expect(text).toContain('error_rate_threshold');
    expect(text).toContain('error_rate');
  });
});
