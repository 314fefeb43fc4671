import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RevisionSpec } from '@weir/core';
import { createTelemetry } from '@weir/telemetry';
import { createMetricsObserver } from './metrics-observer';

const caller = { tenantId: 'demo', appId: 'a', apiKeyId: 'k' };
const revision = { id: 'rev@1' } as RevisionSpec;

it('counts shedding apart from errors and records finished requests with TTFT and TPOT', async () => {
  const telemetry = createTelemetry({ serviceName: 'test' });
  const observer = createMetricsObserver(telemetry.metrics, () => 'llamacpp', (replicaId) => (replicaId === 'rev@1/0' ? 'batch' : undefined));
  observer.onRejected?.(caller, 'queue_full');
  observer.onRejected?.(caller, 'invalid_request');
  observer.onFinished?.({
    caller,
    route: 'chat.completions',
    alias: 'tiny',
    revision,
    outcome: { finishReason: 'length', usage: { inputTokens: 5, outputTokens: 11 }, costNanoUsd: 1, modelRevision: 'rev@1', timings: { queueMs: 3, ttftMs: 100, totalMs: 600 } },
    replicaId: 'rev@1/0',
  });
  const server = createServer(telemetry.metricsHandler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  try {
    const text = await (await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)).text();
    expect(text).toMatch(/weir_admission_rejections_total\{[^}]*reason="queue_full"[^}]*\} 1/);
    expect(text).not.toMatch(/weir_admission_rejections_total\{[^}]*reason="invalid_request"/);
    expect(text).toMatch(/weir_requests_total\{[^}]*status="completed"[^}]*\} 1/);
    expect(text).toMatch(/weir_requests_total\{[^}]*status="rejected"[^}]*\} 2/);
    // TPOT = (0.6 − 0.1) / (11 − 1) = 0.05 s
    expect(text).toMatch(/gen_ai_server_time_per_output_token_sum\{[^}]*gen_ai_provider_name="llamacpp"[^}]*\} 0\.05/);
    expect(text).toMatch(/gen_ai_server_time_to_first_token_sum\{[^}]*\} 0\.1/);
    // Latency per tenant and pool (the replica's pool).
    expect(text).toMatch(/gen_ai_server_time_to_first_token_sum\{(?=[^}]*tenant="demo")(?=[^}]*pool="batch")[^}]*\} 0\.1/);
    expect(text).toMatch(/gen_ai_server_time_per_output_token_sum\{(?=[^}]*tenant="demo")(?=[^}]*pool="batch")[^}]*\} 0\.05/);
  } finally {
    server.close();
    await telemetry.shutdown();
  }
});

it('counts cache lookups by tier and result, and what hits saved (USD, seconds)', async () => {
  const telemetry = createTelemetry({ serviceName: 'test' });
  const observer = createMetricsObserver(telemetry.metrics, () => 'llamacpp');
  observer.onCache?.({ caller, revision, result: 'miss' });
  observer.onCache?.({ caller, revision, result: 'bypass', reason: 'personalised' });
  observer.onCache?.({ caller, revision, result: 'hit', tier: 'exact', savedNanoUsd: 1_500_000, savedMs: 2_500 });
  observer.onCache?.({ caller, revision, result: 'hit', tier: 'exact', savedNanoUsd: 500_000, savedMs: 500 });
  const server = createServer(telemetry.metricsHandler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  try {
    const text = await (await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)).text();
    expect(text).toMatch(/weir_cache_lookups_total\{(?=[^}]*tenant="demo")(?=[^}]*tier="exact")(?=[^}]*result="hit")[^}]*\} 2/);
    expect(text).toMatch(/weir_cache_lookups_total\{(?=[^}]*tier="none")(?=[^}]*result="miss")[^}]*\} 1/);
    expect(text).toMatch(/weir_cache_lookups_total\{(?=[^}]*tier="none")(?=[^}]*result="bypass")[^}]*\} 1/);
    // 0.0015 + 0.0005 USD; 2.5 + 0.5 s
    expect(text).toMatch(/weir_cache_saved_usd_total\{(?=[^}]*revision="rev@1")(?=[^}]*tier="exact")[^}]*\} 0\.002/);
    expect(text).toMatch(/weir_cache_saved_seconds_total\{(?=[^}]*tier="exact")[^}]*\} 3/);
  } finally {
    server.close();
    await telemetry.shutdown();
  }
});
