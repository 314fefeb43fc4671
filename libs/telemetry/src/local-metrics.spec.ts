/**
 * The in-memory aggregation of the per-request series exports exactly what the SDK's own
 * instruments export for the same measurements: the same Prometheus text, line for line.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createLocalMetrics } from './local-metrics';
import { METER_NAME } from './telemetry';
import { createWeirMetrics, type WeirMetrics } from './weir-metrics';

async function scrape(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  try {
    const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`);
    return await res.text();
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
}

/** The same measurements: several series, values on bucket boundaries, zeros, skipped values. */
function record(m: WeirMetrics): void {
  for (const [i, status] of (['completed', 'completed', 'failed', 'cancelled', 'deadline', 'filtered'] as const).entries()) {
    m.recordRequest({
      tenant: i % 2 === 0 ? 'acme' : 'globex',
      operation: i % 3 === 0 ? 'chat' : 'generation',
      requestModel: 'fast',
      responseModel: 'fast@2',
      provider: i === 1 ? undefined : 'openai-compatible',
      pool: i === 2 ? undefined : 'interactive',
      status,
      errorType: status === 'failed' ? 'upstream_error' : undefined,
      durationS: [0.01, 0.02, 0.5, 81.92, 100, 0][i],
      ttftS: i === 4 ? undefined : [0.001, 0.005, 0.3, 10, 0, 0.0005][i],
      inputTokens: [1, 4, 0, 16, 70_000_000, 3][i],
      outputTokens: [0, 64, 2, 1, 5, Number.NaN][i],
    });
  }
  m.recordRequest({ tenant: 'acme', operation: 'chat', requestModel: 'none', status: 'rejected', errorType: 'rate_limited', durationS: 0, inputTokens: 0, outputTokens: 0 });
  m.recordRejection({ tenant: 'acme', reason: 'rate_limited' });
  m.recordRejection({ tenant: 'acme', reason: 'rate_limited' });
  m.recordQueueTime({ tenant: 'acme', revision: 'fast@2', queueS: 0.001 });
  m.recordQueueTime({ tenant: 'acme', queueS: 3 });
  m.recordSchedulerRejection({ pool: 'interactive', tenant: 'globex', priority: 'batch', reason: 'queue_full' });
  m.recordSchedulerQueueTime({ pool: 'interactive', tenant: 'globex', priority: 'interactive', outcome: 'granted', queueS: 0.25 });
  m.recordAdmissionDecision({ outcome: 'admitted' });
  m.recordAdmissionDecision({ outcome: 'rejected', reason: 'budget_exhausted' });
  m.recordAdmissionDecision({ outcome: 'admitted' });
}

describe('createLocalMetrics', () => {
  it('exports the per-request series as the SDK instruments do, line for line', async () => {
    const resource = resourceFromAttributes({ 'service.name': 'equivalence' });

    const sdkExporter = new PrometheusExporter({ preventServerStart: true });
    const sdkProvider = new MeterProvider({ resource, readers: [sdkExporter] });
    record(createWeirMetrics(sdkProvider.getMeter(METER_NAME)));

    const local = createLocalMetrics(METER_NAME, resource);
    const localExporter = new PrometheusExporter({ preventServerStart: true, metricProducers: [local] });
    const localProvider = new MeterProvider({ resource, readers: [localExporter] });
    record(createWeirMetrics(localProvider.getMeter(METER_NAME), local));

    const viaSdk = await scrape((req, res) => sdkExporter.getMetricsRequestHandler(req, res));
    const viaLocal = await scrape((req, res) => localExporter.getMetricsRequestHandler(req, res));
    const lines = (text: string) => text.split('\n').filter((l) => l.trim() !== '').sort();
    expect(lines(viaLocal)).toEqual(lines(viaSdk));
    // The comparison covered the series recorded on every request.
    expect(viaLocal).toContain('gen_ai_server_request_duration_bucket{');
    expect(viaLocal).toMatch(/weir_admission_decisions_total\{[^}]*outcome="admitted"[^}]*\} 2/);
    await Promise.all([sdkProvider.shutdown(), localProvider.shutdown()]);
  });

  it('exports nothing for an instrument that recorded nothing', async () => {
    const local = createLocalMetrics('scope');
    local.histogram({ name: 'h', description: 'd', unit: 's' }, [1]);
    const { resourceMetrics } = await local.collect();
    expect(resourceMetrics.scopeMetrics).toEqual([]);
  });
});
