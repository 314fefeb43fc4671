import { engineOrigin, parseEngineCounters } from './engine-client';

describe('engine client', () => {
  it('reads the engine token counters per replica and ignores other series', () => {
    const text = [
      '# HELP weir_engine_output_tokens_total Output tokens produced',
      '# TYPE weir_engine_output_tokens_total counter',
      'weir_engine_output_tokens_total{replica="r@1/0",revision="r@1",otel_scope_name="@weir/telemetry"} 120',
      'weir_engine_input_tokens_total{replica="r@1/0",revision="r@1",otel_scope_name="@weir/telemetry"} 35',
      'weir_engine_output_tokens_total{replica="r@1/1",revision="r@1"} 7',
      'weir_engine_active_sequences{replica="r@1/0",revision="r@1"} 2',
      'target_info{service_name="x"} 1',
    ].join('\n');
    expect(parseEngineCounters(text)).toEqual([
      { replicaId: 'r@1/0', revisionId: 'r@1', inputTokens: 35, outputTokens: 120 },
      { replicaId: 'r@1/1', revisionId: 'r@1', inputTokens: 0, outputTokens: 7 },
    ]);
  });

  it('refuses a counter that is not a non-negative integer', () => {
    expect(() => parseEngineCounters('weir_engine_input_tokens_total{replica="a",revision="b"} 1.5')).toThrow(/not a non-negative integer/);
  });

  it.each([
    ['http://127.0.0.1:8081/v1', 'http://127.0.0.1:8081'],
    ['http://127.0.0.1:8081/v1/', 'http://127.0.0.1:8081'],
    ['http://127.0.0.1:8081', 'http://127.0.0.1:8081'],
  ])('takes the origin of %s', (base, origin) => {
    expect(engineOrigin(base)).toBe(origin);
  });
});
