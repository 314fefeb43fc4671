/**
 * The scheduler (ARCHITECTURE.md §2 step 3, §8 "the scheduler owns replica capacity"): pools
 * of replicas measured in sequences and KV-cache tokens, tenant-fair deadline-aware bounded
 * queues in front of them, start-time estimates that reject what cannot meet its deadline,
 * and brownout when a pool loses capacity.
 *
 * - **Pools**: every replica belongs to one pool: `interactive` (shared), `batch`, or a
 *   dedicated pool that serves only the tenants assigned to it. A request runs in its tenant's
 *   dedicated pool if it has one (and never elsewhere); else a batch-class request runs in
 *   `batch` when that pool serves the revision; else in `interactive`.
 * - **Capacity**: a replica never holds more leases than its slots, nor more context tokens
 *   (input + output limit of each lease) than its KV tokens.
 * - **Queues**: one per pool and revision, with two classes: interactive first, batch only when
 *   no interactive work waits. Each class is a {@link FairQueue} (deficit round robin between
 *   tenants by weight, in tokens; earliest deadline first inside a tenant). Bounded in entries
 *   and bytes per pool and per tenant, scaled by the pool's remaining capacity.
 * - **Deadlines**: a request that cannot start now is rejected with `deadline_unmeetable` when
 *   its estimated start plus its estimated run (prefill, then its expected output at the
 *   measured decode rate) ends past its deadline (see `estimator.ts`): work that would be cut
 *   at its deadline is refused while that is still cheap, instead of taking a sequence it
 *   cannot use. One that waits until it can no longer finish in time leaves with `deadline`
 *   before it starts; one whose client leaves, with `cancelled`.
 * - **Fair share of sequences** (`settings.fairShareHeadroom`): the queue's order is fair, and
 *   so are the slots: while a tenant of the pool queue is below its weighted share of the
 *   sequences, tenants at or above theirs leave the last few free sequences to it, so it starts
 *   at once instead of waiting for a flooding tenant's next release.
 * - **TPOT target** (`settings.tpotTargetMs`, optional): each replica's admitted batch follows
 *   its measured p95 time per output token (`tpot-limiter.ts`), below its declared slots.
 * - **Brownout**: when a pool's capacity drops (a replica unhealthy, or its measured decode
 *   rate falls below `slowdownThreshold` of its peers') the bounds shrink with it, entries
 *   over the new bound are shed (batch first), and in pools that serve interactive work batch
 *   work is shed and refused (`shed`) until the capacity is back.
 */
import {
  BATCH_POOL,
  type Clock,
  DEFAULT_SCHEDULING,
  INTERACTIVE_POOL,
  type LeaseUsageReport,
  type RequestPriority,
  type ScheduleRejectReason,
  type ScheduleRequest,
  type ScheduleResult,
  type SchedulerService,
  type SchedulingDefaults,
  type SlotLease,
} from '@weir/core';
import { ewma, estimateStartMs, fairShareAhead, queueBounds, type QueueBounds, type SequenceRates, sequenceSeconds, speedFactor, throughputFromReport } from './estimator';
import { FairQueue } from './fair-queue';
import { TpotLimiter } from './tpot-limiter';

/** A replica the scheduler may place work on. */
export interface ReplicaCapacity {
  id: string;
  revisionId: string;
  /** Concurrent sequences (≥ 1). */
  slots: number;
  /** KV-cache tokens across its sequences. Default unbounded (the composition passes slots × context window). */
  kvTokens?: number;
  /** Its pool. Default `interactive`. */
  pool?: string;
}

/** What the scheduler reads of a tenant. */
export interface SchedulingTenant {
  id: string;
  /** Share between tenants (tokens, DRR). Default 1. */
  schedulingWeight?: number;
  /** Its dedicated pool. Default none. */
  dedicatedPool?: string;
}

/** Where a queued request left the queue, for {@link SchedulerObserver.onDequeued}. */
export type DequeueOutcome = 'granted' | 'deadline' | 'cancelled' | 'shed';

/** Labels every scheduler event carries: bounded sets (config ids, enums). */
export interface SchedulerEventLabels {
  pool: string;
  revisionId: string;
  tenant: string;
  priority: RequestPriority;
}

/** Told about the scheduler's decisions (metrics, logs). Handlers must not throw. */
export interface SchedulerObserver {
  /** A request got no lease (any reason, immediate or after queueing). */
  onRejected?(event: SchedulerEventLabels & { reason: ScheduleRejectReason }): void;
  /** A request left the queue (granted or not) after `queueMs`. Immediate grants are reported with 0. */
  onDequeued?(event: SchedulerEventLabels & { outcome: DequeueOutcome; queueMs: number }): void;
  /** A pool queue entered or left brownout. */
  onBrownout?(event: { pool: string; revisionId: string; active: boolean; capacityRatio: number }): void;
  /** A lease expired unreleased (its holder vanished). */
  onLeaseExpired?(replicaId: string): void;
  /** The TPOT target moved a replica's admitted batch (`limit` sequences; `p95Ms` the measured TPOT that moved it). */
  onSlotLimit?(event: { replicaId: string; limit: number; slots: number; p95Ms: number; change: 'decreased' | 'increased' }): void;
}

/** Options of {@link createPoolScheduler}. */
export interface PoolSchedulerOptions {
  replicas: readonly ReplicaCapacity[];
  /** Weights and dedicated pools; tenants not listed have weight 1 and no dedicated pool. */
  tenants?: readonly SchedulingTenant[];
  /** Queue entries per replica of a pool's revision queue (scaled by capacity). Default 256. */
  maxQueuePerReplica?: number;
  /** See {@link SchedulingDefaults}; absent fields take {@link DEFAULT_SCHEDULING}. */
  settings?: Partial<SchedulingDefaults>;
  /**
   * A replica whose measured per-sequence decode rate (EWMA) is below this fraction of the
   * median of its pool queue's other replicas counts as lost capacity (brownout). Default 0.8.
   */
  slowdownThreshold?: number;
  /**
   * Reject with `deadline_unmeetable` at arrival, and drop queued work that can no longer
   * finish by its deadline before it starts (true); or only let deadlines pass in the queue
   * (false). Default true.
   */
  rejectUnmeetable?: boolean;
  /**
   * A lease not released by its deadline plus this (ms) is released automatically, so a caller
   * that vanished (a crashed gateway) cannot hold capacity forever. Default 30,000.
   */
  leaseGraceMs?: number;
  /** @deprecated use `observer.onLeaseExpired`. */
  onLeaseExpired?: (replicaId: string) => void;
  observer?: SchedulerObserver;
  clock: Clock;
}

/** One replica as the scheduler sees it now. */
export interface ReplicaStats {
  id: string;
  revisionId: string;
  pool: string;
  healthy: boolean;
  slots: number;
  /** Sequences it may be given now: `slots`, or less while the TPOT target holds it back. */
  slotLimit: number;
  inFlight: number;
  /** KV tokens (Infinity when unbounded). */
  kvTokens: number;
  kvTokensInUse: number;
  /** Measured per-sequence prefill throughput (EWMA, tokens/s); the prior before any measurement. */
  prefillTokensPerS: number;
  /** Measured per-sequence decode throughput (fast EWMA, tokens/s); the prior before any measurement. */
  decodeTokensPerS: number;
  /** 0 when out of rotation, else its speed factor (1 = its usual speed). */
  capacity: number;
}

/** Queued work of one tenant in one class of a pool queue. */
export interface TenantQueueStats {
  tenant: string;
  priority: RequestPriority;
  requests: number;
  tokens: number;
}

/** One pool queue (pool × revision) now. */
export interface LaneStats {
  pool: string;
  revisionId: string;
  /** Remaining capacity ÷ configured capacity, in replica-equivalents (1 = whole). */
  capacityRatio: number;
  brownout: boolean;
  bounds: QueueBounds;
  requests: number;
  tokens: number;
  bytes: number;
  byTenant: TenantQueueStats[];
}

/** Point-in-time scheduler figures, for metrics and tests. */
export interface SchedulerStats {
  /** Queued requests by revision (every pool). */
  queued: Record<string, number>;
  /** Leases held by replica. */
  inFlight: Record<string, number>;
  /** Replicas currently out of rotation. */
  unhealthy: string[];
  lanes: LaneStats[];
  replicas: ReplicaStats[];
}

/** The scheduler plus its live figures and replica health. */
export interface PoolScheduler extends SchedulerService {
  stats(): SchedulerStats;
  /**
   * Takes a replica out of rotation (`false`: no new leases; leases held run on) or puts it
   * back (`true`, and queued work is dispatched to it). Its pool's bounds follow. Unknown ids
   * are ignored.
   */
  setReplicaHealth(replicaId: string, healthy: boolean): void;
  /** Every replica the scheduler knows. */
  replicas(): readonly ReplicaCapacity[];
}

interface ReplicaState {
  spec: ReplicaCapacity;
  pool: string;
  kvTokens: number;
  inFlight: number;
  kvInUse: number;
  healthy: boolean;
  prefill?: number;
  /** First-token overhead (EWMA of short prompts' TTFT, ms). */
  overheadMs?: number;
  /** Per-sequence decode rate (EWMA, tokens/s). */
  decode?: number;
  /** Decode measurements so far (the slowdown detector waits for {@link MIN_SPEED_SAMPLES}). */
  decodeSamples: number;
  /** Present when the settings name a TPOT target. */
  limiter?: TpotLimiter;
  /** Work still to run on each held lease: [granted at (ms), sequence-seconds]. */
  leases: Set<{ grantedAt: number; seconds: number }>;
}

interface Entry {
  tenant: string;
  cost: number;
  deadlineAt: number;
  seq: number;
  bytes: number;
  inputTokens: number;
  outputTokens: number;
  priority: RequestPriority;
  request: ScheduleRequest;
  enqueuedAt: number;
  settle(result: ScheduleResult): void;
}

interface Lane {
  pool: string;
  revisionId: string;
  kind: 'interactive' | 'batch' | 'dedicated';
  replicas: ReplicaState[];
  interactive: FairQueue<Entry>;
  batch: FairQueue<Entry>;
  bytes: number;
  tenantBytes: Map<string, number>;
  /** EWMA of output tokens ÷ output limit: how much of its limit a request uses. Prior 1. */
  outputFill?: number;
  brownout: boolean;
  /** Leases held per tenant in this lane (absent = 0). */
  tenantInFlight: Map<string, number>;
}

const laneKey = (pool: string, revisionId: string) => `${pool}\u0000${revisionId}`;

/** Decode measurements a replica and its peers need before a slowdown counts as lost capacity. */
const MIN_SPEED_SAMPLES = 8;

/**
 * How much more loaded (occupancy, 0–1) than the least-loaded replica a request's affinity
 * replica may be and still get it: the cache hit on a shared prefix is worth a little
 * imbalance, not a queue. 0.25 = a quarter of the replica's sequences or KV tokens.
 */
const AFFINITY_SLACK = 0.25;

/** Rendezvous (highest-random-weight) score of `key` on `replica`, in [0, 2^32): FNV-1a over both, then MurmurHash3's fmix32. */
function rendezvousScore(key: string, replica: string): number {
  let h = 0x811c9dc5;
  const mix = (s: string) => {
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193);
    }
  };
  mix(key);
  mix('\u0000');
  mix(replica);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Creates the scheduler. */
export function createPoolScheduler(options: PoolSchedulerOptions): PoolScheduler {
  const { clock } = options;
  const settings: SchedulingDefaults = { ...DEFAULT_SCHEDULING, ...options.settings };
  const perReplica = { length: options.maxQueuePerReplica ?? 256, bytes: settings.maxQueueBytesPerReplica };
  const slowdownThreshold = options.slowdownThreshold ?? 0.8;
  const rejectUnmeetable = options.rejectUnmeetable ?? true;
  const leaseGraceMs = options.leaseGraceMs ?? 30_000;
  const observer = options.observer ?? {};
  const onLeaseExpired = options.observer?.onLeaseExpired ?? options.onLeaseExpired;
  const prior: SequenceRates = { prefillTokensPerS: settings.priorPrefillTokensPerS, decodeTokensPerS: settings.priorDecodeTokensPerS };
  const tenants = new Map((options.tenants ?? []).map((t) => [t.id, t]));
  const weightOf = (tenant: string) => tenants.get(tenant)?.schedulingWeight ?? 1;

  const lanes = new Map<string, Lane>();
  const byId = new Map<string, ReplicaState>();
  const laneOf = new Map<ReplicaState, Lane>();
  for (const spec of options.replicas) {
    const pool = spec.pool ?? INTERACTIVE_POOL;
    const state: ReplicaState = {
      spec,
      pool,
      kvTokens: spec.kvTokens ?? Infinity,
      inFlight: 0,
      kvInUse: 0,
      healthy: true,
      leases: new Set(),
      decodeSamples: 0,
      ...(settings.tpotTargetMs !== undefined ? { limiter: new TpotLimiter({ targetMs: settings.tpotTargetMs, maxLimit: spec.slots }) } : {}),
    };
    const key = laneKey(pool, spec.revisionId);
    let lane = lanes.get(key);
    if (!lane) {
      const queue = () => new FairQueue<Entry>({ quantum: settings.quantumTokens, weightOf });
      const kind = pool === INTERACTIVE_POOL ? 'interactive' : pool === BATCH_POOL ? 'batch' : 'dedicated';
      lane = { pool, revisionId: spec.revisionId, kind, replicas: [], interactive: queue(), batch: queue(), bytes: 0, tenantBytes: new Map(), brownout: false, tenantInFlight: new Map() };
      lanes.set(key, lane);
    }
    lane.replicas.push(state);
    byId.set(spec.id, state);
    laneOf.set(state, lane);
  }
  let seq = 0;

  // --- capacity ---------------------------------------------------------------------------

  // Panic routing (Envoy's panic threshold at 0 %): when no replica of a pool queue is
  // healthy, health is ignored for it, so a prober that misjudges every replica (a starved
  // host, a network blip) cannot turn a working fleet into 503s.
  const usable = (lane: Lane, r: ReplicaState) => r.healthy || !lane.replicas.some((x) => x.healthy);
  const ratesOf = (r: ReplicaState): SequenceRates => ({
    prefillTokensPerS: r.prefill ?? prior.prefillTokensPerS,
    decodeTokensPerS: r.decode ?? prior.decodeTokensPerS,
    ...(r.overheadMs !== undefined ? { firstTokenOverheadS: r.overheadMs / 1000 } : {}),
  });
  /** Sequences the replica may be given now (its slots, or the TPOT target's lower limit). */
  const slotLimit = (r: ReplicaState) => r.limiter?.limit ?? r.spec.slots;
  const replicaCapacity = (lane: Lane, r: ReplicaState) => {
    if (!usable(lane, r)) return 0;
    // A few generations at different batch sizes differ by design: judge only on enough of them.
    if (r.decodeSamples < MIN_SPEED_SAMPLES) return 1;
    const peers: number[] = [];
    for (const p of lane.replicas) if (p !== r && p.decode !== undefined && p.decodeSamples >= MIN_SPEED_SAMPLES && usable(lane, p)) peers.push(p.decode);
    return speedFactor(r.decode, peers, slowdownThreshold);
  };
  /** Remaining capacity in replica-equivalents. */
  const laneCapacity = (lane: Lane) => lane.replicas.reduce((sum, r) => sum + replicaCapacity(lane, r), 0);
  const boundsOf = (lane: Lane) => queueBounds(laneCapacity(lane), perReplica, settings.tenantQueueShare);
  const inBrownout = (lane: Lane) => laneCapacity(lane) < lane.replicas.length - 1e-9;

  /** The lane's rates: its usable replicas' rates averaged by their slots. */
  const laneRates = (lane: Lane): SequenceRates => {
    let slots = 0;
    let prefill = 0;
    let decode = 0;
    let overhead = 0;
    for (const r of lane.replicas) {
      if (!usable(lane, r)) continue;
      const rates = ratesOf(r);
      const n = slotLimit(r);
      slots += n;
      prefill += rates.prefillTokensPerS * n;
      decode += rates.decodeTokensPerS * n;
      overhead += (rates.firstTokenOverheadS ?? 0) * n;
    }
    return slots === 0 ? prior : { prefillTokensPerS: prefill / slots, decodeTokensPerS: decode / slots, firstTokenOverheadS: overhead / slots };
  };

  type Placement = ReplicaState | 'blocked' | 'avoided';
  const loadOf = (r: ReplicaState) => Math.max(r.inFlight / slotLimit(r), r.kvTokens === Infinity ? 0 : r.kvInUse / r.kvTokens);
  /**
   * The least-loaded replica with room (load = the larger of its sequence and KV-token
   * occupancy: least outstanding tokens). With an affinity key, the key's own replica —
   * highest rendezvous score among the lane's usable replicas (Thaler and Ravishankar's HRW
   * hashing: a key moves only when its replica leaves) — while its load is within
   * `affinitySlack` of the least loaded.
   */
  const place = (lane: Lane, tokens: number, avoid?: readonly string[], affinityKey?: string): Placement => {
    let best: ReplicaState | undefined;
    let load = Infinity;
    let avoided = false;
    let home: ReplicaState | undefined;
    let homeScore = -1;
    for (const r of lane.replicas) {
      if (!usable(lane, r)) continue;
      if (affinityKey !== undefined && !avoid?.includes(r.spec.id)) {
        const score = rendezvousScore(affinityKey, r.spec.id);
        if (score > homeScore) {
          home = r;
          homeScore = score;
        }
      }
      if (r.inFlight >= slotLimit(r) || r.kvInUse + tokens > r.kvTokens) continue;
      if (avoid?.includes(r.spec.id)) {
        avoided = true;
        continue;
      }
      const l = loadOf(r);
      if (l < load) {
        best = r;
        load = l;
      }
    }
    if (home && best && home !== best && home.inFlight < slotLimit(home) && home.kvInUse + tokens <= home.kvTokens && loadOf(home) <= load + AFFINITY_SLACK) return home;
    return best ?? (avoided ? 'avoided' : 'blocked');
  };

  // --- fair share of sequences ------------------------------------------------------------

  /**
   * Who may take a free sequence of the lane now (see `SchedulingDefaults.fairShareHeadroom`):
   * everyone while more than the headroom is free, or no active tenant is below its weighted
   * share; else only tenants below their share. Computed once per decision.
   */
  const shareGate = (lane: Lane): ((tenant: string) => boolean) | undefined => {
    if (!(settings.fairShareHeadroom > 0)) return undefined;
    let slots = 0;
    let free = 0;
    for (const r of lane.replicas) {
      if (!usable(lane, r)) continue;
      const n = slotLimit(r);
      slots += n;
      free += Math.max(0, n - r.inFlight);
    }
    const headroom = Math.floor(settings.fairShareHeadroom * slots + 1e-9);
    if (headroom === 0 || free > headroom) return undefined;
    const active = new Set<string>();
    for (const [t, n] of lane.tenantInFlight) if (n > 0) active.add(t);
    for (const t of lane.interactive.backlogged()) active.add(t);
    for (const t of lane.batch.backlogged()) active.add(t);
    let weights = 0;
    for (const t of active) weights += weightOf(t);
    const underShare = (t: string) => (lane.tenantInFlight.get(t) ?? 0) < (slots * weightOf(t)) / (weights + (active.has(t) ? 0 : weightOf(t)));
    let someoneUnder = false;
    for (const t of active) {
      if (underShare(t)) {
        someoneUnder = true;
        break;
      }
    }
    if (!someoneUnder) return undefined;
    return underShare;
  };

  // --- leases ------------------------------------------------------------------------------

  const grant = (lane: Lane, replica: ReplicaState, entry: Pick<Entry, 'cost' | 'inputTokens' | 'outputTokens' | 'request'>, queueMs: number): SlotLease => {
    replica.inFlight++;
    replica.kvInUse += entry.cost;
    const tenant = entry.request.caller.tenantId;
    lane.tenantInFlight.set(tenant, (lane.tenantInFlight.get(tenant) ?? 0) + 1);
    replica.limiter?.noteInFlight(replica.inFlight);
    const work = { grantedAt: clock.now(), seconds: sequenceSeconds(entry.inputTokens, entry.outputTokens * (lane.outputFill ?? 1), ratesOf(replica)) };
    replica.leases.add(work);
    let released = false;
    const release = (report?: LeaseUsageReport) => {
      if (released) return;
      released = true;
      clearTimeout(expiry);
      replica.inFlight--;
      replica.kvInUse -= entry.cost;
      const held = (lane.tenantInFlight.get(tenant) ?? 1) - 1;
      if (held > 0) lane.tenantInFlight.set(tenant, held);
      else lane.tenantInFlight.delete(tenant);
      replica.leases.delete(work);
      if (report) learn(lane, replica, report, entry.outputTokens, work.grantedAt);
      rebalance(lane);
    };
    const expiry = setTimeout(() => {
      onLeaseExpired?.(replica.spec.id);
      release();
    }, Math.max(0, entry.request.deadlineAt - clock.now()) + leaseGraceMs);
    expiry.unref?.();
    return { replicaId: replica.spec.id, queueMs, release };
  };

  const learn = (lane: Lane, r: ReplicaState, report: LeaseUsageReport, outputLimit: number, grantedAt: number) => {
    const sample = throughputFromReport(report, r.overheadMs ?? 0);
    const alpha = settings.ewmaAlpha;
    if (sample.firstTokenOverheadMs !== undefined) r.overheadMs = ewma(r.overheadMs, sample.firstTokenOverheadMs, alpha);
    if (sample.prefillTokensPerS !== undefined) r.prefill = ewma(r.prefill, sample.prefillTokensPerS, alpha);
    if (sample.decodeTokensPerS !== undefined) {
      r.decode = ewma(r.decode, sample.decodeTokensPerS, alpha);
      r.decodeSamples++;
      if (r.limiter) {
        const tpotMs = 1000 / sample.decodeTokensPerS;
        const p95Before = r.limiter.p95();
        const change = r.limiter.observe(tpotMs, grantedAt, clock.now());
        if (change) observer.onSlotLimit?.({ replicaId: r.spec.id, limit: r.limiter.limit, slots: r.spec.slots, p95Ms: Math.max(p95Before ?? tpotMs, tpotMs), change });
      }
    }
    if (outputLimit > 0) lane.outputFill = ewma(lane.outputFill, Math.min(1, report.outputTokens / outputLimit), alpha);
  };

  // --- queue -------------------------------------------------------------------------------

  const entrySeconds = (lane: Lane, e: Pick<Entry, 'inputTokens' | 'outputTokens'>, rates: SequenceRates) =>
    sequenceSeconds(e.inputTokens, e.outputTokens * (lane.outputFill ?? 1), rates);

  const labels = (lane: Lane, e: Pick<Entry, 'tenant' | 'priority'>) => ({ pool: lane.pool, revisionId: lane.revisionId, tenant: e.tenant, priority: e.priority });

  /** Removes a queued entry and answers it with a rejection (not for grants). */
  const leave = (lane: Lane, e: Entry, reason: 'deadline' | 'cancelled' | 'shed', message: string, retryAfterMs?: number) => {
    const queue = e.priority === 'batch' ? lane.batch : lane.interactive;
    if (!queue.remove(e)) return;
    untrackBytes(lane, e);
    const queueMs = clock.now() - e.enqueuedAt;
    observer.onDequeued?.({ ...labels(lane, e), outcome: reason, queueMs });
    observer.onRejected?.({ ...labels(lane, e), reason });
    e.settle({ ok: false, reason, message, queueMs, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) });
  };

  const untrackBytes = (lane: Lane, e: Entry) => {
    lane.bytes -= e.bytes;
    const left = (lane.tenantBytes.get(e.tenant) ?? 0) - e.bytes;
    if (left <= 0) lane.tenantBytes.delete(e.tenant);
    else lane.tenantBytes.set(e.tenant, left);
  };

  /** Batch work may run in this lane now (never while interactive work waits; not in a brownout of a pool serving interactive work). */
  const batchRuns = (lane: Lane) => lane.interactive.size === 0 && !(lane.brownout && lane.kind !== 'batch');

  const dispatch = (lane: Lane) => {
    for (;;) {
      const queue = lane.interactive.size > 0 ? lane.interactive : batchRuns(lane) ? lane.batch : undefined;
      if (!queue || queue.size === 0) return;
      const eligible = shareGate(lane);
      const head = queue.peek(eligible);
      // Every waiting tenant is at its share and only the headroom is free: it is kept for the others.
      if (!head) return;
      let chosen: Entry | undefined;
      let replica: ReplicaState | undefined;
      const placed = place(lane, head.cost, head.request.avoidReplicas, head.request.affinityKey);
      if (typeof placed !== 'string') {
        chosen = head;
        replica = placed;
      } else if (placed === 'avoided') {
        // The head avoids the only replica with room (a retry after a failure there): let the
        // first entry that may use it go instead; its tenant is charged as usual.
        for (const e of queue.entries()) {
          if (eligible && !eligible(e.tenant)) continue;
          const p = place(lane, e.cost, e.request.avoidReplicas, e.request.affinityKey);
          if (typeof p !== 'string') {
            chosen = e;
            replica = p;
            break;
          }
        }
      }
      // 'blocked': no replica has room for the head; it keeps its place (no starvation of large requests).
      if (!chosen || !replica) return;
      if (rejectUnmeetable) {
        // Started now, would it end by its deadline? If not, the sequence would only produce a
        // stream cut at the deadline: drop it before it costs a replica anything.
        const runMs = entrySeconds(lane, chosen, ratesOf(replica)) * 1000;
        const slackMs = chosen.deadlineAt - clock.now();
        if (runMs > slackMs) {
          leave(lane, chosen, 'deadline', `the request waited until it could no longer finish before its deadline (its estimated run is ${Math.round(runMs)} ms, ${Math.round(slackMs)} ms were left); it was dropped before starting. Raise deadline_ms or retry later`);
          continue;
        }
      }
      queue.take(chosen);
      untrackBytes(lane, chosen);
      const queueMs = clock.now() - chosen.enqueuedAt;
      observer.onDequeued?.({ ...labels(lane, chosen), outcome: 'granted', queueMs });
      chosen.settle({ ok: true, lease: grant(lane, replica, chosen, queueMs) });
    }
  };

  /**
   * Re-reads the lane's capacity after a change (health, a measurement, a release): enters or
   * leaves brownout, sheds what no longer fits the shrunken bounds (batch first, latest
   * deadline first), then dispatches.
   */
  const rebalance = (lane: Lane) => {
    const brownout = inBrownout(lane);
    if (brownout !== lane.brownout) {
      lane.brownout = brownout;
      observer.onBrownout?.({ pool: lane.pool, revisionId: lane.revisionId, active: brownout, capacityRatio: laneCapacity(lane) / lane.replicas.length });
    }
    if (brownout) {
      const ratio = (laneCapacity(lane) / lane.replicas.length).toFixed(2);
      if (lane.kind !== 'batch') {
        for (const e of [...lane.batch.entries()]) {
          leave(lane, e, 'shed', `batch work shed: pool ${lane.pool} lost capacity (at ${ratio} of its replicas) and keeps it for interactive work; retry later`, 5_000);
        }
      }
      const bounds = boundsOf(lane);
      const overBound = () => lane.interactive.size + lane.batch.size > bounds.length || lane.bytes > bounds.bytes;
      while (overBound() && lane.batch.size > 0) {
        const latest = [...lane.batch.entries()].reduce((a, b) => (b.deadlineAt > a.deadlineAt ? b : a));
        leave(lane, latest, 'shed', `batch work shed: pool ${lane.pool} lost capacity (at ${ratio} of its replicas) and its queue bound shrank; retry later`, 5_000);
      }
    }
    dispatch(lane);
  };

  /** Estimated wait (ms) before a new entry of `tenant` would start, by the fair order. */
  const estimateWait = (lane: Lane, e: Pick<Entry, 'tenant' | 'priority' | 'deadlineAt' | 'seq' | 'inputTokens' | 'outputTokens'>) => {
    const rates = laneRates(lane);
    const now = clock.now();
    let inFlightSeconds = 0;
    let servers = 0;
    for (const r of lane.replicas) {
      for (const l of r.leases) inFlightSeconds += Math.max(0, l.seconds - (now - l.grantedAt) / 1000);
      servers += slotLimit(r) * replicaCapacity(lane, r);
    }
    const classAhead = (queue: FairQueue<Entry>) => {
      let own = 0;
      for (const q of queue.queueOf(e.tenant)) {
        if (q.deadlineAt < e.deadlineAt || (q.deadlineAt === e.deadlineAt && q.seq < e.seq)) own += entrySeconds(lane, q, rates);
      }
      const mine = entrySeconds(lane, e, rates);
      const others = queue.backlogged().filter((t) => t !== e.tenant).map((t) => ({
        amount: queue.queueOf(t).reduce((s, q) => s + entrySeconds(lane, q, rates), 0),
        weight: weightOf(t),
      }));
      // Work served before this entry finishes its turn, minus the entry itself.
      return fairShareAhead(own + mine, weightOf(e.tenant), others) - mine;
    };
    let aheadSeconds = 0;
    if (e.priority === 'batch') {
      for (const q of lane.interactive.entries()) aheadSeconds += entrySeconds(lane, q, rates);
      aheadSeconds += classAhead(lane.batch);
    } else {
      aheadSeconds += classAhead(lane.interactive);
    }
    return { waitMs: estimateStartMs({ inFlightSeconds, aheadSeconds, servers }), runMs: entrySeconds(lane, e, rates) * 1000 };
  };

  const reject = (lane: Lane | undefined, request: ScheduleRequest, priority: RequestPriority, reason: ScheduleRejectReason, message: string, retryAfterMs?: number): Promise<ScheduleResult> => {
    observer.onRejected?.({ pool: lane?.pool ?? 'none', revisionId: request.revisionId, tenant: request.caller.tenantId, priority, reason });
    return Promise.resolve({ ok: false, reason, message, queueMs: 0, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) });
  };

  const laneFor = (request: ScheduleRequest, priority: RequestPriority): Lane | undefined => {
    const dedicated = tenants.get(request.caller.tenantId)?.dedicatedPool;
    if (dedicated) return lanes.get(laneKey(dedicated, request.revisionId));
    if (priority === 'batch') {
      const batch = lanes.get(laneKey(BATCH_POOL, request.revisionId));
      if (batch) return batch;
    }
    return lanes.get(laneKey(INTERACTIVE_POOL, request.revisionId));
  };

  return {
    acquire(request) {
      const priority = request.priority ?? 'interactive';
      const lane = laneFor(request, priority);
      const tenant = request.caller.tenantId;
      // Dedicated lanes are reachable only through their tenants' `dedicatedPool` (laneFor).
      if (!lane) return reject(lane, request, priority, 'no_replica', `no replica of ${request.revisionId} serves this tenant's pool; use another model or ask the platform team`);
      const candidates = lane.replicas.filter((r) => usable(lane, r) && !request.avoidReplicas?.includes(r.spec.id));
      if (candidates.length === 0) {
        return reject(lane, request, priority, 'no_replica', `no healthy replica in pool ${lane.pool} serves ${request.revisionId}; retry shortly`, 1_000);
      }
      if (request.signal.aborted) return reject(lane, request, priority, 'cancelled', 'the request was cancelled');
      // A deadline already past never starts an engine (it would produce a token and bill it).
      if (request.deadlineAt <= clock.now()) return reject(lane, request, priority, 'deadline', 'the deadline passed before the request could start');
      const largest = Math.max(...lane.replicas.map((r) => r.kvTokens));
      if (request.tokens > largest) {
        // No output limit to lower when the KV need is all input (an embedding's largest item).
        const fix = request.tokens > (request.inputTokens ?? 0) ? 'lower the output limit or shorten the input' : 'shorten the input';
        return reject(lane, request, priority, 'no_replica', `the request needs ${request.tokens} KV tokens and the largest replica of pool ${lane.pool} holds ${largest}; ${fix}`);
      }
      if (priority === 'batch' && lane.brownout && lane.kind !== 'batch') {
        return reject(lane, request, priority, 'shed', `batch work is refused while pool ${lane.pool} has lost capacity (brownout); retry later`, 5_000);
      }

      // Not capped at `tokens`: an embedding batch holds the KV of its largest item but prefills every item.
      const inputTokens = Math.max(0, request.inputTokens ?? 0);
      const entry: Entry = {
        tenant,
        cost: request.tokens,
        deadlineAt: request.deadlineAt,
        seq: seq++,
        bytes: request.bytes ?? request.tokens * 4,
        inputTokens,
        outputTokens: Math.max(0, request.tokens - inputTokens),
        priority,
        request,
        enqueuedAt: clock.now(),
        settle: () => undefined,
      };

      const nothingAhead = priority === 'batch' ? lane.interactive.size === 0 && lane.batch.size === 0 : lane.interactive.size === 0;
      const gate = nothingAhead ? shareGate(lane) : undefined;
      if (nothingAhead && (!gate || gate(tenant))) {
        const placed = place(lane, request.tokens, request.avoidReplicas, request.affinityKey);
        if (typeof placed !== 'string') {
          observer.onDequeued?.({ ...labels(lane, entry), outcome: 'granted', queueMs: 0 });
          return Promise.resolve({ ok: true, lease: grant(lane, placed, entry, 0) });
        }
      }

      const bounds = boundsOf(lane);
      const queued = lane.interactive.size + lane.batch.size;
      const overPool = () => lane.interactive.size + lane.batch.size >= bounds.length || lane.bytes + entry.bytes > bounds.bytes;
      if (overPool() && priority === 'interactive') {
        // Batch is shed first: an interactive arrival displaces queued batch work (latest deadline first).
        while (overPool() && lane.batch.size > 0) {
          const latest = [...lane.batch.entries()].reduce((a, b) => (b.deadlineAt > a.deadlineAt ? b : a));
          leave(lane, latest, 'shed', `batch work shed: displaced by interactive work in the full queue of pool ${lane.pool}; retry later`, 5_000);
        }
      }
      if (overPool()) {
        return reject(lane, request, priority, 'queue_full', `the queue of pool ${lane.pool} for ${request.revisionId} is full (${queued} waiting, ${lane.bytes} bytes); retry later`, 1_000);
      }
      const load = lane.interactive.tenantLoad(tenant).requests + lane.batch.tenantLoad(tenant).requests;
      if (load >= bounds.tenantLength || (lane.tenantBytes.get(tenant) ?? 0) + entry.bytes > bounds.tenantBytes) {
        return reject(lane, request, priority, 'queue_full', `this tenant's share of the queue of pool ${lane.pool} for ${request.revisionId} is full (${load} waiting); retry later`, 1_000);
      }
      if (rejectUnmeetable) {
        const { waitMs, runMs } = estimateWait(lane, entry);
        const slackMs = request.deadlineAt - clock.now();
        if (waitMs + runMs > slackMs) {
          const retryAfterMs = Number.isFinite(waitMs) ? Math.max(1_000, Math.ceil(waitMs + runMs - slackMs)) : 5_000;
          return reject(
            lane,
            request,
            priority,
            'deadline_unmeetable',
            `the estimated start (in ${Math.round(waitMs)} ms) plus the estimated run (${Math.round(runMs)} ms: prefill and the expected output at the measured rate) ends past the deadline (in ${Math.round(slackMs)} ms); raise the deadline (deadline_ms, or the x-weir-deadline-ms header), lower the output limit, or retry later`,
            retryAfterMs,
          );
        }
      }

      return new Promise<ScheduleResult>((resolve) => {
        const onAbort = () => leave(lane, entry, 'cancelled', 'the request was cancelled while queued');
        const timer = setTimeout(() => leave(lane, entry, 'deadline', 'the deadline passed while the request was queued'), Math.max(0, request.deadlineAt - clock.now()));
        timer.unref?.(); // a queued waiter alone must not keep a process alive
        entry.settle = (result) => {
          clearTimeout(timer);
          request.signal.removeEventListener('abort', onAbort);
          resolve(result);
        };
        request.signal.addEventListener('abort', onAbort, { once: true });
        (priority === 'batch' ? lane.batch : lane.interactive).push(entry);
        lane.bytes += entry.bytes;
        lane.tenantBytes.set(tenant, (lane.tenantBytes.get(tenant) ?? 0) + entry.bytes);
        dispatch(lane);
      });
    },

    stats() {
      const queued: Record<string, number> = {};
      const laneStats: LaneStats[] = [];
      for (const lane of lanes.values()) {
        queued[lane.revisionId] = (queued[lane.revisionId] ?? 0) + lane.interactive.size + lane.batch.size;
        const byTenant: TenantQueueStats[] = [];
        for (const [priority, queue] of [['interactive', lane.interactive], ['batch', lane.batch]] as const) {
          for (const t of queue.backlogged()) byTenant.push({ tenant: t, priority, ...queue.tenantLoad(t) });
        }
        laneStats.push({
          pool: lane.pool,
          revisionId: lane.revisionId,
          capacityRatio: laneCapacity(lane) / lane.replicas.length,
          brownout: inBrownout(lane),
          bounds: boundsOf(lane),
          requests: lane.interactive.size + lane.batch.size,
          tokens: lane.interactive.tokens + lane.batch.tokens,
          bytes: lane.bytes,
          byTenant,
        });
      }
      const inFlight: Record<string, number> = {};
      const replicaStats: ReplicaStats[] = [];
      for (const r of byId.values()) {
        inFlight[r.spec.id] = r.inFlight;
        const lane = laneOf.get(r) as Lane;
        const rates = ratesOf(r);
        replicaStats.push({
          id: r.spec.id,
          revisionId: r.spec.revisionId,
          pool: r.pool,
          healthy: r.healthy,
          slots: r.spec.slots,
          slotLimit: slotLimit(r),
          inFlight: r.inFlight,
          kvTokens: r.kvTokens,
          kvTokensInUse: r.kvInUse,
          prefillTokensPerS: rates.prefillTokensPerS,
          decodeTokensPerS: rates.decodeTokensPerS,
          capacity: replicaCapacity(lane, r),
        });
      }
      return { queued, inFlight, unhealthy: [...byId.values()].filter((r) => !r.healthy).map((r) => r.spec.id), lanes: laneStats, replicas: replicaStats };
    },

    setReplicaHealth(replicaId, healthy) {
      const r = byId.get(replicaId);
      if (!r || r.healthy === healthy) return;
      r.healthy = healthy;
      rebalance(laneOf.get(r) as Lane);
    },

    replicas: () => [...byId.values()].map((r) => ({ ...r.spec })),
  };
}
