import type { IncomingMessage, ServerResponse } from 'node:http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createWeirMetrics, type WeirMetrics } from './weir-metrics';

/** Options of {@link createTelemetry}. */
export interface TelemetryOptions {
  /** Resource attribute `service.name` (shown on `target_info`), e.g. `weir-all-in-one`. */
  serviceName: string;
  /** Resource attribute `service.version`. */
  serviceVersion?: string;
}

/** A process's metrics: the typed façade, the Prometheus scrape handler, and shutdown. */
export interface Telemetry {
  metrics: WeirMetrics;
  /**
   * Serves the Prometheus text exposition (status 200, `content-type: text/plain`) of every
   * metric on each call, whatever the path: mount it at `GET /metrics`. A plain
   * `node:http` handler, so it also works as an express handler.
   */
  metricsHandler(req: IncomingMessage, res: ServerResponse): void;
  /** Stops the meter provider; later recordings are dropped. Call once at shutdown. */
  shutdown(): Promise<void>;
}

/** The instrumentation scope name every Weir series carries (`otel_scope_name`). */
export const METER_NAME = '@weir/telemetry';

/**
 * Creates a process's metrics: an OpenTelemetry SDK `MeterProvider` whose one reader is the
 * Prometheus exporter, with its own HTTP server disabled (`preventServerStart`) so the scrape
 * endpoint is mounted on the app's server instead. The provider is not registered globally.
 */
export function createTelemetry(options: TelemetryOptions): Telemetry {
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const provider = new MeterProvider({
    resource: resourceFromAttributes({
      'service.name': options.serviceName,
      ...(options.serviceVersion !== undefined ? { 'service.version': options.serviceVersion } : {}),
    }),
    readers: [exporter],
  });
  const metrics = createWeirMetrics(provider.getMeter(METER_NAME));
  let stopped: Promise<void> | undefined;
  return {
    metrics,
    metricsHandler: (req, res) => exporter.getMetricsRequestHandler(req, res),
    shutdown: () => (stopped ??= provider.shutdown()),
  };
}
