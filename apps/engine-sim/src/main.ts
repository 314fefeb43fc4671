/**
 * The simulated engine server process: one simulated GPU replica behind the same
 * OpenAI-compatible API as `apps/engine-llamacpp`, for capacity and load work only. It has no
 * model: it answers with filler tokens (`tok1 tok2 …`) at the profile's speed, and every
 * response says so (`x-weir-simulated: true`, `owned_by: "weir-simulator"`).
 *
 * Environment:
 * - `PORT` (default 8090), `HOST` (default 127.0.0.1)
 * - `WEIR_MODEL_NAME`: the model id served (default `weir-simulated`)
 * - `WEIR_REPLICA_ID`, `WEIR_REVISION_ID`: labels of the engine token counters on `/metrics`
 * - the profile: `SIM_PREFILL_TPS` (default 10000), `SIM_DECODE_MS` (default `1:20,32:40`),
 *   `SIM_KV_TOKENS` (default 65536), `SIM_MAX_SEQUENCES` (default 32), `SIM_SEED` (default 1)
 * - `ENGINE_MAX_QUEUE` (requests waiting for one of the SIM_MAX_SEQUENCES slots, default 64),
 *   `ENGINE_DRAIN_MS` (default 25,000), `ENGINE_USAGE_RETENTION_MS`, `ENGINE_USAGE_MAX_ENTRIES`
 * - `WEIR_TLS_CA`, `WEIR_TLS_CERT`, `WEIR_TLS_KEY`, `WEIR_TLS_ALLOWED_PEERS`: mutual TLS as
 *   engine-llamacpp (docs/security.md §8)
 * - `WEIR_HEADERS_TIMEOUT_MS` (15,000), `WEIR_REQUEST_TIMEOUT_MS` (60,000: receiving the request,
 *   not streaming its answer), `WEIR_KEEP_ALIVE_TIMEOUT_MS`, `WEIR_MAX_CONNECTIONS` (4,096),
 *   `WEIR_MAX_CONNECTIONS_PER_ADDRESS` (4,096 here): the listener's limits on slow and greedy
 *   clients (`DEFAULT_ENGINE_CLIENT_LIMITS`, docs/security.md §7)
 * - `LOG_LEVEL` (default info)
 *
 * Shutdown on SIGTERM/SIGINT as engine-llamacpp: not ready, stop accepting, drain, exit 0.
 */
import { createGenerationUsageLog, DEFAULT_USAGE_MAX_ENTRIES, DEFAULT_USAGE_RETENTION_MS, DEFAULT_ENGINE_CLIENT_LIMITS, defaultEnginePeerPolicies, listenEngineServer } from '@weir/engine-server';
import { clientLimitsFromEnv } from '@weir/service-runtime';
import { serviceTlsFromEnv } from '@weir/service-tls';
import { createSimulatedEngine } from '@weir/engines';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { profileFromEnv } from './profile-env';
import { createSimServer } from './sim-server';

function intEnv(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(raw)}`);
  return value;
}

function main(): void {
  const logger = createLogger({ name: 'engine-sim', level: (process.env.LOG_LEVEL ?? 'info') as 'info' });
  const spec = profileFromEnv(process.env);
  const modelName = process.env.WEIR_MODEL_NAME || 'weir-simulated';
  const port = intEnv('PORT', 8090, 0);
  const host = process.env.HOST || '127.0.0.1';
  const drainMs = intEnv('ENGINE_DRAIN_MS', 25_000, 0);
  // Mutual TLS when the material is configured; checked before anything loads.
  const tls = serviceTlsFromEnv('engine', { defaultPeers: ['relay'], logger });
  // Timeouts and connection caps of the listener (docs/security.md §7); checked before anything loads.
  const limits = clientLimitsFromEnv(process.env, DEFAULT_ENGINE_CLIENT_LIMITS);
  const engine = createSimulatedEngine(spec, { logger });
  const replicaId = process.env.WEIR_REPLICA_ID || `${modelName}/${port}`;
  const revisionId = process.env.WEIR_REVISION_ID || modelName;
  const telemetry = createTelemetry({ serviceName: 'weir-engine-sim' });
  telemetry.observeEngines(() => {
    const s = engine.stats();
    return [{ replica: replicaId, revision: revisionId, outputTokens: s.generatedTokens, inputTokens: s.promptTokens, activeSequences: s.activeSequences }];
  });
  let draining = false;
  const app = createSimServer(engine, {
    modelName,
    logger,
    metricsHandler: (req, res) => telemetry.metricsHandler(req, res),
    maxQueue: intEnv('ENGINE_MAX_QUEUE', 64, 0),
    usageLog: createGenerationUsageLog({
      retentionMs: intEnv('ENGINE_USAGE_RETENTION_MS', DEFAULT_USAGE_RETENTION_MS, 0),
      maxEntries: intEnv('ENGINE_USAGE_MAX_ENTRIES', DEFAULT_USAGE_MAX_ENTRIES, 1),
    }),
    isDraining: () => draining,
    ...(tls ? { peers: defaultEnginePeerPolicies(tls.allowedPeers) } : {}),
  });
  const server = listenEngineServer(app, { port, host, limits, ...(tls ? { tls } : {}) }, () => logger.info({ host, port, tls: tls !== undefined, modelName, profile: spec, simulated: true }, 'simulated engine listening'));

  const shutdown = (signal: string): void => {
    if (draining) return;
    draining = true;
    logger.info({ signal, drainMs }, 'draining');
    const force = setTimeout(() => server.closeAllConnections(), drainMs);
    force.unref();
    server.close(() => {
      clearTimeout(force);
      void engine.close().finally(() => {
        logger.info({}, 'stopped');
        process.exit(0);
      });
    });
    server.closeIdleConnections();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  const parent = process.ppid;
  const watch = setInterval(() => {
    if (process.ppid !== parent) {
      clearInterval(watch);
      shutdown('parent exited');
    }
  }, 1_000);
  watch.unref();
}

try {
  main();
} catch (err) {
  console.error(err);
  process.exit(1);
}
