/**
 * Remote engine replicas: the engine servers (`apps/engine-llamacpp`, `apps/engine-sim`, or a
 * hosted OpenAI-compatible or Anthropic upstream) that serve a revision over HTTP, and what
 * every composition that uses them needs: the replicas with their scheduler placement, one
 * adapter per replica (OpenAI-compatible; Anthropic Messages for an Anthropic upstream), the
 * prompt-token counter over their `/tokenize`, the `/readyz` health checks that take a
 * replica out of rotation (and back), and the test of a generation outcome that says its
 * replica could not be reached.
 *
 * The split topology spreads these over its services (the relay builds the adapters and reports
 * unreachable replicas, the scheduler places work on the replicas and runs the health checks,
 * the gateway counts prompt tokens); the all-in-one uses all of them in one process for every
 * revision that lists `replicas`.
 */
import { replicaPlacement, servingReplicas } from '@weir/config';
import type { EngineAdapter, GenerationOutcome, ReplicaEndpoint, RevisionSpec } from '@weir/core';
import { createReplicaProber, type PoolScheduler } from '@weir/scheduling';
import { type Dispatcher, request } from 'undici';
import { createAnthropicEngine } from './anthropic/anthropic-engine';
import { egressDispatcher } from './egress-dispatcher';
import { type EngineLogger, silentLogger } from './logger';
import { createOpenAICompatibleEngine } from './openai-compatible/openai-compatible-engine';
import { createRemoteTokenCounter, type TokenCounter } from './openai-compatible/remote-token-counter';

/** A replica reached over HTTP, placed for the scheduler. */
export interface RemoteReplica extends ReplicaEndpoint {
  /** The revision it serves. */
  revisionId: string;
  /** Its pool (`replicaPlacement`: the replica's, else the revision's, else `interactive`). */
  pool: string;
  /** KV-cache tokens across its sequences (the replica's, else the revision's, else slots × context window). */
  kvTokens: number;
  /**
   * True for one of the revision's configured `replicas` (a Weir engine server: it answers
   * `/healthz`, `/readyz` and `/tokenize` beside `/v1`, reports usage on every chunk, stops gracefully);
   * false for a hosted upstream (OpenAI-compatible or Anthropic) standing in as its
   * revision's one replica.
   */
  configured: boolean;
}

/** Options of {@link remoteReplicas}. */
export interface RemoteReplicasOptions {
  /**
   * Only the revisions' configured `replicas` (true: the all-in-one, which runs a hosted
   * upstream without replicas in-process); or also a hosted upstream (OpenAI-compatible or
   * Anthropic) as its revision's one replica `<revision>/0` (false: the split, see
   * `servingReplicas`). Default false.
   */
  configuredOnly?: boolean;
}

/**
 * The replicas of `revisions` reached over HTTP, in config order, each with its revision and
 * its scheduler placement (`servingReplicas` + `replicaPlacement` of `@weir/config`). A
 * revision that lists no `replicas` contributes nothing, except a hosted upstream
 * (OpenAI-compatible or Anthropic) when `configuredOnly` is false.
 */
export function remoteReplicas(revisions: readonly RevisionSpec[], options: RemoteReplicasOptions = {}): RemoteReplica[] {
  return revisions.flatMap((revision) => {
    const configured = new Set((revision.replicas ?? []).map((r) => r.id));
    return servingReplicas(revision)
      .filter((replica) => !options.configuredOnly || configured.has(replica.id))
      .map((replica) => ({ ...replica, revisionId: revision.id, ...replicaPlacement(revision, replica), configured: configured.has(replica.id) }));
  });
}

/** Default of {@link ReplicaEngineOptions.firstTokenTimeoutMs} and {@link ReplicaEngineOptions.idleTimeoutMs} (ms). */
export const REPLICA_STREAM_TIMEOUT_MS = 10_000;

/** Options of {@link createReplicaEngine} and {@link createReplicaEngines}. */
export interface ReplicaEngineOptions {
  /**
   * Cut a call with `upstream_timeout` when no first token arrives within this (ms), for
   * replicas of revisions that are not hosted upstreams (those keep their own setting).
   * Default {@link REPLICA_STREAM_TIMEOUT_MS}.
   */
  firstTokenTimeoutMs?: number;
  /** The same for silence between stream events (ms). Default {@link REPLICA_STREAM_TIMEOUT_MS}. */
  idleTimeoutMs?: number;
  /** Metadata only (status and error codes). Default silent. */
  logger?: EngineLogger;
  /**
   * The undici dispatcher for Weir's own engine servers (the mutual-TLS agent of
   * `@weir/service-tls`, issue 14 part 8). Never used for a hosted upstream (OpenAI-compatible
   * or Anthropic), which keeps undici's global dispatcher and the public CAs. Default: the global one.
   */
  dispatcher?: Dispatcher;
}

/**
 * The adapter of one replica of `revision`: `baseUrl` the replica's, `maxConcurrency` its
 * slots, `contextTokens` the revision's context window. An Anthropic revision
 * (`engine.kind: anthropic`, whose one replica is the API itself: `servingReplicas`) gets the
 * Anthropic Messages adapter with the revision's model name, API key variable and timeouts.
 * Any other gets the OpenAI-compatible adapter: for a hosted upstream revision
 * (`engine.kind: openai-compatible`) the upstream's model name, API key variable, API and
 * timeouts and tokenizer are kept; for Weir's own engine servers the model is the revision id, the chat API
 * is used, and usage on every chunk and graceful stop are on (so a stream cut by a cancel or
 * deadline is billed from the engine's own count).
 */
export function createReplicaEngine(revision: RevisionSpec, replica: ReplicaEndpoint, options: ReplicaEngineOptions = {}): EngineAdapter {
  if (revision.engine.kind === 'anthropic') {
    return createAnthropicEngine(
      { ...revision.engine, baseUrl: replica.baseUrl, maxConcurrency: replica.slots, contextTokens: revision.contextWindow },
      { logger: options.logger ?? silentLogger },
    );
  }
  const upstream = revision.engine.kind === 'openai-compatible' ? revision.engine : undefined;
  return createOpenAICompatibleEngine(
    {
      kind: 'openai-compatible',
      baseUrl: replica.baseUrl,
      upstreamModel: upstream?.upstreamModel ?? revision.id,
      apiKeyEnv: upstream?.apiKeyEnv,
      api: upstream?.api ?? 'chat',
      firstTokenTimeoutMs: upstream?.firstTokenTimeoutMs ?? options.firstTokenTimeoutMs ?? REPLICA_STREAM_TIMEOUT_MS,
      idleTimeoutMs: upstream?.idleTimeoutMs ?? options.idleTimeoutMs ?? REPLICA_STREAM_TIMEOUT_MS,
      maxConcurrency: replica.slots,
      continuousUsageStats: upstream ? upstream.continuousUsageStats : true,
      gracefulStop: upstream ? upstream.gracefulStop : true,
      ...(upstream?.tokenizer !== undefined ? { tokenizer: upstream.tokenizer } : {}),
      contextTokens: revision.contextWindow,
      variableDimensions: revision.embedding?.variableDimensions === true,
    },
    { logger: options.logger ?? silentLogger, ...(upstream || !options.dispatcher ? {} : { dispatcher: options.dispatcher }) },
  );
}

/**
 * One adapter ({@link createReplicaEngine}) per replica in `replicas`, by replica id.
 *
 * @param revisions where each replica's revision (`revisionId`) is found.
 * @throws Error when a replica's revision is not in `revisions`.
 */
export function createReplicaEngines(revisions: readonly RevisionSpec[], replicas: readonly RemoteReplica[], options: ReplicaEngineOptions = {}): Map<string, EngineAdapter> {
  const byId = new Map(revisions.map((r) => [r.id, r]));
  return new Map(
    replicas.map((replica) => {
      const revision = byId.get(replica.revisionId);
      if (!revision) throw new Error(`replica ${replica.id}: revision ${replica.revisionId} is not in the configuration`);
      return [replica.id, createReplicaEngine(revision, replica, options)] as const;
    }),
  );
}

/**
 * The revision's prompt-token counter over its configured replicas' `POST /tokenize` (each
 * tried in turn, `timeoutMs` per attempt, default 1,000; the UTF-8 upper bound when none
 * answers: see `createRemoteTokenCounter`; `dispatcher`: as {@link ReplicaEngineOptions.dispatcher}), or undefined when it lists no `replicas` or is an
 * Anthropic revision (no `/tokenize` there; the caller counts another way: an in-process
 * engine, or the upper bound for a hosted upstream).
 */
export function replicaTokenCounter(revision: RevisionSpec, options: { timeoutMs?: number; dispatcher?: Dispatcher } = {}): TokenCounter | undefined {
  if (!revision.replicas || revision.replicas.length === 0 || revision.engine.kind === 'anthropic') return undefined;
  return createRemoteTokenCounter({
    baseUrls: revision.replicas.map((r) => r.baseUrl),
    ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
  });
}

/**
 * The prompt-token counter of a hosted revision (`openai-compatible` or `anthropic`): exactly
 * what its adapter's `countInputTokens` counts — the prompt as the upstream receives it (chat
 * framing included), with the declared tokenizer (`engine.tokenizer`) plus the per-message
 * overhead of `token-bound.ts` (an upper bound), else, and until the encoding has loaded, the
 * UTF-8 byte bound — for a process that reserves without running the adapter (the split
 * gateway), so both topologies reserve, and therefore bill, a request the same. Undefined for
 * any other engine kind.
 */
export function adapterTokenCounter(revision: RevisionSpec): TokenCounter | undefined {
  const e = revision.engine;
  if (e.kind !== 'openai-compatible' && e.kind !== 'anthropic') return undefined;
  // The adapter only counts here: it makes no call and reads no key.
  const adapter = e.kind === 'anthropic' ? createAnthropicEngine(e, { env: {} }) : createOpenAICompatibleEngine(e, { env: {} });
  return (input, limit) => adapter.countInputTokens(input, limit);
}

/** Error codes of an engine adapter that mean the replica itself is unreachable or hung (not a bad request). */
const REPLICA_DOWN = new Set(['upstream_unavailable', 'upstream_timeout']);

/**
 * True when a generation failed because its replica could not be reached or hung
 * (`upstream_unavailable` or `upstream_timeout`) before producing any output token: the relay
 * reports such a replica so the scheduler takes it out of rotation at once.
 */
export function replicaUnreachable<O extends Pick<GenerationOutcome, 'error' | 'usage'>>(outcome: O): outcome is O & { error: NonNullable<O['error']> } {
  return outcome.error !== undefined && REPLICA_DOWN.has(outcome.error.code) && outcome.usage.outputTokens === 0;
}

/**
 * `<base without /v1>/readyz` of a replica base URL (`http://host:port/v1`): readiness, not
 * liveness. A draining replica (shutting down gracefully: its in-flight generations finish, new
 * ones are refused with 503) still answers `/healthz` but not `/readyz`, so it leaves rotation
 * and stays out until it is ready again — probing `/healthz` put it back every second for the
 * whole drain, and its refusals reached clients.
 */
export function replicaHealthUrl(baseUrl: string): string {
  return `${baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '')}/readyz`;
}

/** A change of a replica's health, for {@link ReplicaHealthChecksOptions.onChange}. */
export interface ReplicaHealthChange {
  replicaId: string;
  revisionId: string;
  healthy: boolean;
  /** `recovered`, or why probes ejected it: `probe_failed` (not 200), `probe_timeout`, `probe_error` (refused, reset). */
  reason: string;
}

/** Options of {@link startReplicaHealthChecks}. */
export interface ReplicaHealthChecksOptions {
  /** Whose rotation the checks drive. */
  scheduler: Pick<PoolScheduler, 'setReplicaHealth'>;
  /**
   * The replicas watched: every one may be reported unreachable; the `configured` ones are
   * also probed on `/readyz` (a hosted upstream has none).
   */
  replicas: readonly RemoteReplica[];
  /** Time between probe rounds (ms). Default 1,000. */
  intervalMs?: number;
  /** A probe without a 200 within this is a failure (ms). Default 1,000. */
  timeoutMs?: number;
  /** Consecutive failed probes that eject a replica. Default 3. */
  failuresToEject?: number;
  /** A replica that has never answered is not ejected by probes during this long after the start (ms). Default 30,000. */
  startupGraceMs?: number;
  /** Logs every change (warn when ejected, info when back) and failed probes (debug). Default silent. */
  logger?: EngineLogger;
  /** The dispatcher of the probes (the mutual-TLS agent when engines serve HTTPS). Default: the guarded egress pool. */
  dispatcher?: Dispatcher;
  /**
   * Called on each change the probes find (not on {@link ReplicaHealthChecks.reportUnreachable},
   * whose caller already knows), after the scheduler was told. Must not throw.
   */
  onChange?(change: ReplicaHealthChange): void;
}

/** Running health checks. */
export interface ReplicaHealthChecks {
  /**
   * Someone (a relay) could not reach the replica: out of rotation now, back when a probe
   * succeeds (a replica that is not probed stays out). Unknown ids are ignored.
   */
  reportUnreachable(replicaId: string): void;
  /**
   * Whether the replica counts as up for `weir_replica_up` (`replicaSamples`' `up`): a probed
   * replica when it answers probes (it has answered, and is not ejected); any other while in
   * rotation (`inRotation`).
   */
  up(replicaId: string, inRotation: boolean): boolean;
  /** Runs one probe round now (startup, tests); the rounds otherwise run every `intervalMs`. */
  probeAll(): Promise<void>;
  /** Stops probing (idempotent). */
  stop(): void;
}

/**
 * Starts the `/readyz` health checks of `replicas` (`createReplicaProber` of
 * `@weir/scheduling` with an HTTP probe: `GET <base without /v1>/readyz`, healthy on 200).
 * A replica that fails `failuresToEject` probes in a row (killed: refused; hung: timeout) is
 * taken out of the scheduler's rotation; one successful probe puts it back. The first round
 * runs after `intervalMs`.
 */
export function startReplicaHealthChecks(options: ReplicaHealthChecksOptions): ReplicaHealthChecks {
  const logger = options.logger ?? silentLogger;
  const revisionOf = new Map(options.replicas.map((r) => [r.id, r.revisionId]));
  const probed = options.replicas.filter((r) => r.configured);
  const healthUrl = new Map(probed.map((r) => [r.id, replicaHealthUrl(r.baseUrl)]));
  const prober = createReplicaProber({
    replicaIds: probed.map((r) => r.id),
    intervalMs: options.intervalMs,
    timeoutMs: options.timeoutMs,
    failuresToEject: options.failuresToEject,
    startupGraceMs: options.startupGraceMs,
    async probe(id, timeoutMs) {
      try {
        const res = await request(healthUrl.get(id) as string, { dispatcher: options.dispatcher ?? egressDispatcher(), headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
        await res.body.dump();
        return res.statusCode === 200;
      } catch (err) {
        logger.debug({ replica: id, err }, 'probe failed');
        throw err;
      }
    },
    onChange(replicaId, healthy, reason) {
      options.scheduler.setReplicaHealth(replicaId, healthy);
      if (healthy) logger.info({ replica: replicaId, reason }, 'replica back in rotation');
      else logger.warn({ replica: replicaId, reason }, 'replica out of rotation');
      options.onChange?.({ replicaId, revisionId: revisionOf.get(replicaId) ?? '', healthy, reason });
    },
  });
  return {
    reportUnreachable(replicaId) {
      if (!revisionOf.has(replicaId)) return;
      options.scheduler.setReplicaHealth(replicaId, false);
      prober.markUnhealthy(replicaId);
    },
    up(replicaId, inRotation) {
      return prober.status()[replicaId]?.up ?? inRotation;
    },
    probeAll: () => prober.probeAll(),
    stop: () => prober.stop(),
  };
}
