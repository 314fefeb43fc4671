/**
 * Reads an engine replica's own counts over HTTP (`apps/engine-llamacpp`): its Prometheus
 * token counters and its per-generation usage (`GET /v1/generations/{id}/usage`).
 */
import type { EngineCounterSample } from '@weir/ledger';

/** An engine's own count of one generation. */
export type GenerationLookup =
  | { found: true; promptTokens: number; completionTokens: number; finished: boolean }
  | { found: false; reason: string };

/** Options of the engine calls. */
export interface EngineCallOptions {
  /** Per-call timeout (ms). Default 5,000. */
  timeoutMs?: number;
  /** fetch to use (tests). Default the global `fetch`. */
  fetch?: typeof fetch;
}

/**
 * An engine's origin from a replica base URL: `http://h:p/v1/` → `http://h:p` (config replicas
 * name the `/v1` base; operators may give either).
 */
export function engineOrigin(baseUrl: string): string {
  return baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
}

const COUNTER = /^(weir_engine_(?:input|output)_tokens_total)\{([^}]*)\}\s+(\S+)/;

/**
 * Parses the engine token counters out of Prometheus text exposition:
 * `weir_engine_input_tokens_total` and `weir_engine_output_tokens_total`, labelled `replica` and
 * `revision` (written by `@weir/telemetry` `observeEngines`). Other series are ignored.
 * @throws Error when a counter's value is not a non-negative integer.
 */
export function parseEngineCounters(text: string): EngineCounterSample[] {
  const byReplica = new Map<string, EngineCounterSample>();
  for (const line of text.split('\n')) {
    const m = COUNTER.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    const value = Number(m[3]);
    if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${m[1]} is not a non-negative integer: ${m[3]}`);
    const replicaId = labels.replica ?? '';
    const revisionId = labels.revision ?? '';
    const key = `${replicaId}\u0000${revisionId}`;
    let s = byReplica.get(key);
    if (!s) byReplica.set(key, (s = { replicaId, revisionId, inputTokens: 0, outputTokens: 0 }));
    if (m[1] === 'weir_engine_input_tokens_total') s.inputTokens += value;
    else s.outputTokens += value;
  }
  return [...byReplica.values()];
}

async function get(url: string, options: EngineCallOptions): Promise<Response> {
  const f = options.fetch ?? fetch;
  return f(url, { signal: AbortSignal.timeout(options.timeoutMs ?? 5_000) });
}

/**
 * The replica's counters from `GET {origin}/metrics`.
 * @throws Error when the replica is unreachable, answers non-200, or serves malformed counters.
 */
export async function fetchEngineCounters(baseUrl: string, options: EngineCallOptions = {}): Promise<EngineCounterSample[]> {
  const res = await get(`${engineOrigin(baseUrl)}/metrics`, options);
  if (!res.ok) throw new Error(`${engineOrigin(baseUrl)}/metrics answered ${res.status}`);
  return parseEngineCounters(await res.text());
}

/**
 * The replica's own count of a generation from `GET {origin}/v1/generations/{id}/usage`. Never
 * throws: unreachable replicas, unknown generations and generations without a final prompt
 * count are `{found: false, reason}`.
 */
export async function lookupGenerationUsage(baseUrl: string, generationId: string, options: EngineCallOptions = {}): Promise<GenerationLookup> {
  const url = `${engineOrigin(baseUrl)}/v1/generations/${encodeURIComponent(generationId)}/usage`;
  try {
    const res = await get(url, options);
    if (res.status === 404) {
      await res.body?.cancel();
      return { found: false, reason: 'unknown to this replica' };
    }
    if (!res.ok) return { found: false, reason: `answered ${res.status}` };
    const body = (await res.json()) as { prompt_tokens?: unknown; completion_tokens?: unknown; finished?: unknown };
    const prompt = body.prompt_tokens;
    const completion = body.completion_tokens;
    if (body.finished !== true) return { found: false, reason: 'still running on this replica' };
    if (typeof prompt !== 'number' || !Number.isSafeInteger(prompt) || typeof completion !== 'number' || !Number.isSafeInteger(completion)) {
      return { found: false, reason: 'the replica has no final count (the generation failed there)' };
    }
    return { found: true, promptTokens: prompt, completionTokens: completion, finished: true };
  } catch (error) {
    return { found: false, reason: `unreachable (${(error as Error).message})` };
  }
}
