/**
 * The llama.cpp engine server process: one model replica behind an OpenAI-compatible API.
 *
 * Environment:
 * - `PORT` (default 8081), `HOST` (default 127.0.0.1)
 * - `WEIR_REPLICA_ID`, `WEIR_REVISION_ID`: labels of the engine's token counters on `/metrics`
 * - `WEIR_MODEL_PATH`: the GGUF file (default `../shared/models/stories260K.gguf` from the repo root)
 * - `WEIR_MODEL_NAME`: the model id served (default the file name without `.gguf`)
 * - `ENGINE_SEQUENCES` (default 4), `ENGINE_THREADS` (default 1), `ENGINE_CONTEXT_SIZE`
 *   (tokens per sequence, default 512), `ENGINE_TEST_TOKEN_DELAY_MS` (test only, default 0)
 * - `ENGINE_MAX_QUEUE` (waiting requests, default 64), `ENGINE_DRAIN_MS` (default 25,000)
 * - `ENGINE_USAGE_RETENTION_MS` (how long `GET /v1/generations/{id}/usage` answers after a
 *   generation ended, default 3,600,000), `ENGINE_USAGE_MAX_ENTRIES` (default 100,000)
 * - `WEIR_TLS_CA`, `WEIR_TLS_CERT`, `WEIR_TLS_KEY` (files): serve HTTPS and require a client
 *   certificate of that CA on every route but `/healthz` and `/readyz` (docs/security.md §8):
 *   generations and stops from the `relay` (`WEIR_TLS_ALLOWED_PEERS` replaces that list),
 *   `/tokenize` from the gateway or relay, usage from reconcile or the relay
 * - `WEIR_HEADERS_TIMEOUT_MS` (15,000), `WEIR_REQUEST_TIMEOUT_MS` (60,000: receiving the request,
 *   not streaming its answer), `WEIR_KEEP_ALIVE_TIMEOUT_MS`, `WEIR_MAX_CONNECTIONS` (4,096),
 *   `WEIR_MAX_CONNECTIONS_PER_ADDRESS` (4,096 here): the listener's limits on slow and greedy
 *   clients (`DEFAULT_ENGINE_CLIENT_LIMITS`, docs/security.md §7)
 * - `LOG_LEVEL` (default info)
 *
 * Shutdown on SIGTERM/SIGINT: `/readyz` turns 503 and new generations get 503; the listener
 * closes; in-flight streams get up to `ENGINE_DRAIN_MS` to finish, then their connections are
 * cut (which aborts them); the model is released and the process exits 0.
 */
import path from 'node:path';
import { createLlamaCppEngine } from '@weir/engines';
import { createLogger, createTelemetry } from '@weir/telemetry';
import { createGenerationUsageLog, DEFAULT_USAGE_MAX_ENTRIES, DEFAULT_USAGE_RETENTION_MS } from './generation-usage-log';
import { DEFAULT_ENGINE_CLIENT_LIMITS, defaultEnginePeerPolicies, listenEngineServer } from '@weir/engine-server';
import { clientLimitsFromEnv } from '@weir/service-runtime';
import { serviceTlsFromEnv } from '@weir/service-tls';
import { createEngineServer } from './server';

function intEnv(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got ${JSON.stringify(raw)}`);
  return value;
}

async function main(): Promise<void> {
  const logger = createLogger({ name: 'engine-llamacpp', level: (process.env.LOG_LEVEL ?? 'info') as 'info' });
  const modelPath = path.resolve(process.env.WEIR_MODEL_PATH || path.resolve(__dirname, '../../../../shared/models/stories260K.gguf'));
  const modelName = process.env.WEIR_MODEL_NAME || path.basename(modelPath, '.gguf');
  const port = intEnv('PORT', 8081, 0);
  const host = process.env.HOST || '127.0.0.1';
  const drainMs = intEnv('ENGINE_DRAIN_MS', 25_000, 0);
  // Mutual TLS when the material is configured; checked before anything loads.
  const tls = serviceTlsFromEnv('engine', { defaultPeers: ['relay'], logger });
  // Timeouts and connection caps of the listener (docs/security.md §7); checked before anything loads.
  const limits = clientLimitsFromEnv(process.env, DEFAULT_ENGINE_CLIENT_LIMITS);

  const engine = await createLlamaCppEngine(
    {
      kind: 'llamacpp',
      modelPath,
      sequences: intEnv('ENGINE_SEQUENCES', 4, 1),
      threads: intEnv('ENGINE_THREADS', 1, 1),
      contextSize: intEnv('ENGINE_CONTEXT_SIZE', 512, 16),
      testTokenDelayMs: intEnv('ENGINE_TEST_TOKEN_DELAY_MS', 0, 0),
      // An embedding revision's replica (`kind: embedding`): an embedding context only, POST /v1/embeddings.
      embeddingOnly: process.env.ENGINE_EMBEDDING === 'true',
    },
    { logger },
  );
  const replicaId = process.env.WEIR_REPLICA_ID || `${modelName}/${port}`;
  const revisionId = process.env.WEIR_REVISION_ID || modelName;
  const telemetry = createTelemetry({ serviceName: 'weir-engine-llamacpp' });
  telemetry.observeEngines(() => {
    const s = engine.stats();
    return [{ replica: replicaId, revision: revisionId, outputTokens: s.generatedTokens, inputTokens: s.promptTokens, activeSequences: s.activeSequences }];
  });
  let draining = false;
  const app = createEngineServer({
    metricsHandler: (req, res) => telemetry.metricsHandler(req, res),
    engine,
    modelName,
    logger,
    maxQueue: intEnv('ENGINE_MAX_QUEUE', 64, 0),
    usageLog: createGenerationUsageLog({
      retentionMs: intEnv('ENGINE_USAGE_RETENTION_MS', DEFAULT_USAGE_RETENTION_MS, 0),
      maxEntries: intEnv('ENGINE_USAGE_MAX_ENTRIES', DEFAULT_USAGE_MAX_ENTRIES, 1),
    }),
    isDraining: () => draining,
    ...(tls ? { peers: defaultEnginePeerPolicies(tls.allowedPeers) } : {}),
  });
  const server = listenEngineServer(app, { port, host, limits, ...(tls ? { tls } : {}) }, () => logger.info({ host, port, tls: tls !== undefined, modelName }, 'engine server listening'));

  const shutdown = (signal: string): void => {
    if (draining) return;
    draining = true;
    logger.info({ signal, drainMs }, 'draining');
    const force = setTimeout(() => server.closeAllConnections(), drainMs);
    force.unref();
    server.close(() => {
      clearTimeout(force);
      engine
        .close()
        .catch((err: unknown) => logger.error({ err }, 'engine close failed'))
        .finally(() => {
          logger.info({}, 'stopped');
          process.exit(0);
        });
    });
    server.closeIdleConnections();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  // Launched by a topology that died without stopping us: we were re-parented; drain and go.
  const parent = process.ppid;
  const watch = setInterval(() => {
    if (process.ppid !== parent) {
      clearInterval(watch);
      shutdown('parent exited');
    }
  }, 1_000);
  watch.unref();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
