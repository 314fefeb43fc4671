/**
 * The seeded plan of a chaos run: every request (which revision, route, stream or not, the
 * upstream's schedule, the client's cancel, deadline, idempotency key and retries), every fault
 * (kill -9 of a process at an instant, the kill switch on for a while), and the configuration
 * (a tenant whose monthly budget the run exhausts, a tokens-per-minute limit, the two revisions).
 */
import { type ChaosSchedule, chaosPromptTokens, chaosPrompt } from '@weir/testing';
import { createPrng, type Prng } from './prng';

/** The two topologies the proof runs over. */
export type ChaosTopologyKind = 'all-in-one' | 'split';

/** Aliases of the two revisions (see {@link chaosConfigYaml}). */
export const REPORTED_ALIAS = 'chaos-reported';
export const COUNTED_ALIAS = 'chaos-counted';
export const REPORTED_REVISION = 'chaos-reported@1';
export const COUNTED_REVISION = 'chaos-counted@1';
export const CHAOS_TENANT = 'demo';

/** Prices (USD per million tokens) of both revisions: high, so a small budget is spent within the run. */
export const CHAOS_PRICING = { inputPerMtok: 2, outputPerMtok: 10 } as const;
/** The revisions' largest output limit. */
export const CHAOS_MAX_OUTPUT_TOKENS = 64;

/** One planned client request. */
export interface PlannedRequest {
  index: number;
  /** `r<index>`: written in the prompt, so the upstream plays `schedule` for it. */
  planId: string;
  /** When it starts, from the run's start (ms). */
  atMs: number;
  alias: typeof REPORTED_ALIAS | typeof COUNTED_ALIAS;
  route: 'chat' | 'generations';
  stream: boolean;
  /** Chat streams: ask for the usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
  schedule: ChaosSchedule;
  maxTokens: number;
  prompt: string;
  /** A short deadline (ms): `x-weir-deadline-ms` on chat, `deadline_ms` on generations. */
  deadlineMs?: number;
  /** The client leaves: after this many deltas (streams) or ms (non-stream). */
  cancel?: { afterDeltas: number } | { afterMs: number };
  /** The idempotency key (`Idempotency-Key` on chat, `request_id` on generations). */
  key?: string;
  /** Keyed requests: attempts after a failure (network error, 5xx, 409, a stream cut without its end). */
  maxRetries: number;
  /** Keyed requests: also retry after the client's own cancel. */
  retryAfterCancel: boolean;
  /** Keyed requests: send once more after an answer (it must replay, not run again). */
  repeatAfterAnswer: boolean;
  /** Split: the gateway tried first. */
  gateway: number;
}

/** One planned fault. */
export type PlannedFault =
  | { kind: 'kill'; atMs: number; /** process name (`all-in-one`, `relay`, `gateway-0`, …) */ target: string; /** down time before the restart (ms) */ downMs: number }
  | { kind: 'kill-switch'; atMs: number; onMs: number };

/** Options of a chaos run. */
export interface ChaosRunOptions {
  seed: number;
  topology: ChaosTopologyKind;
  /** Client requests (not counting retries). Default 400. */
  requests?: number;
  /** Requests start within this window (ms). Default 60,000. */
  durationMs?: number;
  /** Most requests in flight at once. Default 8. */
  concurrency?: number;
  /** kill -9 faults: all-in-one kills (default ~1 per 20 s, at least 1); split: one per service, this many rounds (default 1). */
  kills?: number;
  /** Kill-switch episodes. Default 2. */
  killSwitches?: number;
  /**
   * The monthly budget as a fraction of what the planned requests would cost uncut, so that it
   * runs out late in the run (with traffic and faults still to come). Default 0.6 for the split
   * and 0.4 for the all-in-one, whose kills take it down for about a third of the run.
   */
  budgetFraction?: number;
  /** The all-in-one's database: its embedded PGlite (default, `npm start`'s) or a temporary Postgres database. */
  database?: 'pglite' | 'postgres';
  /** After the last request: wait for the upstream to be idle, then this long, before reconciling (ms). Default 5,000. */
  settleMs?: number;
  /** A reservation or dead holder's lease may outlive its expiry by this much before it counts as held (ms). Default 15,000. */
  holdGraceMs?: number;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

/** The whole plan. */
export interface ChaosPlan {
  seed: number;
  topology: ChaosTopologyKind;
  durationMs: number;
  concurrency: number;
  requests: PlannedRequest[];
  faults: PlannedFault[];
  /** The tenant's monthly budget (nano-USD). */
  budgetNano: number;
  /** The tenant's tokens per minute. */
  tokensPerMinute: number;
}

/** The split's services killed once per round (a random instance of those that have several). */
export const SPLIT_KILL_SERVICES = ['gateway', 'admission', 'relay', 'ledger', 'scheduler', 'router'] as const;

/** Builds the plan of a seed; the same options give the same plan. */
export function planChaos(options: ChaosRunOptions): ChaosPlan {
  const rng = createPrng(options.seed);
  const count = options.requests ?? 400;
  const durationMs = options.durationMs ?? 60_000;
  const requests: PlannedRequest[] = [];
  const starts = Array.from({ length: count }, () => Math.floor(rng.next() * durationMs)).sort((a, b) => a - b);
  for (let index = 0; index < count; index++) requests.push(planRequest(rng.fork(`request-${index}`), index, starts[index], options.seed));

  const faults: PlannedFault[] = [];
  const frng = rng.fork('faults');
  // Faults land in [10 %, 85 %] of the window, so requests run before, across and after them.
  const instant = () => Math.floor(durationMs * (0.1 + 0.75 * frng.next()));
  if (options.topology === 'all-in-one') {
    const kills = options.kills ?? Math.max(1, Math.round(durationMs / 20_000));
    for (let i = 0; i < kills; i++) faults.push({ kind: 'kill', atMs: instant(), target: 'all-in-one', downMs: frng.int(0, 1_500) });
  } else {
    const rounds = options.kills ?? 1;
    for (let r = 0; r < rounds; r++) {
      for (const service of SPLIT_KILL_SERVICES) {
        const target = service === 'gateway' ? `gateway-${frng.int(0, 1)}` : service === 'admission' ? frng.pick(['admission', 'admission-1']) : service;
        faults.push({ kind: 'kill', atMs: instant(), target, downMs: frng.int(0, 1_500) });
      }
    }
  }
  for (let i = 0; i < (options.killSwitches ?? 2); i++) faults.push({ kind: 'kill-switch', atMs: instant(), onMs: frng.int(500, 2_500) });
  faults.sort((a, b) => a.atMs - b.atMs);

  // What the planned requests would cost if nothing cut them (nano-USD), and their tokens per minute.
  const uncut = requests.map((r) => {
    const output = Math.min(r.schedule.tokens, r.maxTokens);
    const input = chaosPromptTokens([{ role: 'user', content: r.prompt }]);
    return { nano: output * CHAOS_PRICING.outputPerMtok * 1_000 + input * CHAOS_PRICING.inputPerMtok * 1_000, worstTokens: r.maxTokens + input };
  });
  const budgetNano = Math.max(1_000_000, Math.round(uncut.reduce((n, c) => n + c.nano, 0) * (options.budgetFraction ?? (options.topology === 'split' ? 0.6 : 0.4))));
  // 1.5× the planned mean rate of worst cases: bursts (uniform arrivals cluster) are limited now and then.
  const tokensPerMinute = Math.max(1_000, Math.round((uncut.reduce((n, c) => n + c.worstTokens, 0) / (durationMs / 60_000)) * 1.5));
  return { seed: options.seed, topology: options.topology, durationMs, concurrency: options.concurrency ?? 8, requests, faults, budgetNano, tokensPerMinute };
}

function planRequest(rng: Prng, index: number, atMs: number, seed: number): PlannedRequest {
  const planId = `r${index}`;
  const alias = rng.chance(0.6) ? REPORTED_ALIAS : COUNTED_ALIAS;
  const route = rng.chance(0.5) ? 'chat' : 'generations';
  const stream = rng.chance(0.65);
  const tokens = rng.int(1, 40);
  // Mostly room for every token (finish stop), sometimes a limit below them (finish length).
  const maxTokens = rng.chance(0.75) ? Math.min(CHAOS_MAX_OUTPUT_TOKENS, tokens + rng.int(0, 10)) : rng.int(1, tokens);
  const schedule: ChaosSchedule = {
    tokens,
    tokenDelayMs: rng.int(8, 30),
    firstTokenDelayMs: rng.int(0, 100),
    ...(rng.chance(0.08) ? { dieAfterTokens: rng.int(0, Math.max(0, tokens - 1)) } : {}),
    ...(rng.chance(0.08) ? { failAttempts: rng.chance(0.75) ? 1 : 99 } : {}),
  };
  const deadlineMs = rng.chance(0.1) ? rng.int(100, 800) : undefined;
  const cancel = stream ? (rng.chance(0.12) ? { afterDeltas: rng.int(1, tokens) } : undefined) : rng.chance(0.05) ? { afterMs: rng.int(50, 500) } : undefined;
  const keyed = rng.chance(0.35);
  return {
    index,
    planId,
    atMs,
    alias,
    route,
    stream,
    includeUsage: rng.chance(0.7),
    schedule,
    maxTokens,
    prompt: chaosPrompt(planId, rng.int(2, 30)),
    ...(deadlineMs !== undefined ? { deadlineMs } : {}),
    ...(cancel ? { cancel } : {}),
    ...(keyed ? { key: `chaos-${seed}-${planId}-${rng.int(0, 1e9).toString(36)}` } : {}),
    maxRetries: keyed ? 3 : 0,
    retryAfterCancel: keyed && rng.chance(0.5),
    repeatAfterAnswer: keyed && rng.chance(0.3),
    gateway: rng.int(0, 1),
  };
}

/** Where the two revisions' replicas are. */
export interface ChaosUpstreamUrls {
  /** The Weir-engine servers (`…/v1`), one replica each. */
  engineReplicas: { id: string; url: string }[];
  /** The no-usage server (`…/v1`). */
  plainUrl: string;
}

/**
 * The run's configuration: `chaos-reported@1` served by replicas that emulate Weir's engines
 * (usage on every chunk, graceful stop), `chaos-counted@1` a hosted OpenAI-compatible upstream
 * that reports no usage (Weir counts with cl100k_base); one tenant with the plan's monthly
 * budget and tokens per minute, a 20 s default deadline and a 5 s reservation grace (so every
 * reservation expires within the run's settle time).
 */
export function chaosConfigYaml(plan: ChaosPlan, upstream: ChaosUpstreamUrls): string {
  const pricing = `{ input_per_mtok: ${CHAOS_PRICING.inputPerMtok}, output_per_mtok: ${CHAOS_PRICING.outputPerMtok} }`;
  return `revisions:
  - id: ${REPORTED_REVISION}
    model: chaos
    # Served by its replicas (the chaos upstream's Weir-engine servers), as a Weir engine server is.
    engine: { kind: simulated }
    context_window: 4096
    max_output_tokens: ${CHAOS_MAX_OUTPUT_TOKENS}
    default_output_tokens: 32
    pricing: ${pricing}
    replicas:
${upstream.engineReplicas.map((r) => `      - { id: ${JSON.stringify(r.id)}, base_url: ${r.url}, slots: 16 }`).join('\n')}
  - id: ${COUNTED_REVISION}
    model: chaos-plain
    engine:
      kind: openai-compatible
      base_url: ${upstream.plainUrl}
      upstream_model: chaos
      max_concurrency: 32
      continuous_usage_stats: false
      tokenizer: cl100k_base
      first_token_timeout_ms: 10000
      idle_timeout_ms: 10000
    context_window: 4096
    max_output_tokens: ${CHAOS_MAX_OUTPUT_TOKENS}
    default_output_tokens: 32
    pricing: ${pricing}
aliases:
  - { name: ${REPORTED_ALIAS}, revision: ${REPORTED_REVISION} }
  - { name: ${COUNTED_ALIAS}, revision: ${COUNTED_REVISION} }
tenants:
  - id: ${CHAOS_TENANT}
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    allowed_aliases: ["*"]
    default_deadline_ms: 20000
    limits: { max_concurrent: 64, tokens_per_minute: ${plan.tokensPerMinute}, monthly_budget_usd: ${(plan.budgetNano / 1e9).toFixed(9)} }
defaults:
  cancel_grace_ms: 100
  admission: { reservation_grace_ms: 5000 }
`;
}
