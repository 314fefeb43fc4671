/**
 * A discrete-event simulation of N replicas ({@link beginStep}/{@link endStep}) behind a
 * least-outstanding-tokens dispatcher, replaying a seeded Poisson arrival process with token
 * lengths drawn from distributions. Pure: the same input gives the same report; no clock, no I/O.
 */
import { CapacityInputError, requirePositive } from './errors';
import { drawTokens, type TokenDistribution, validateDistribution } from './distribution';
import { createRandom, exponential } from './prng';
import { type ReplicaProfile, validateProfile } from './profile';
import { beginStep, endStep, enqueue, fitsReplica, IDLE_REPLICA, kvReserved, kvUsed, type ReplicaState, type ReplicaStep } from './replica';
import { type Percentiles, summarize } from './stats';

/** What to simulate. */
export interface SimulationInput {
  profile: ReplicaProfile;
  /** Replicas behind the dispatcher (integer ≥ 1). */
  replicas: number;
  /** Mean arrival rate of the Poisson process (requests/s, > 0). */
  rps: number;
  /** Arrivals are generated over [0, durationSeconds); the run then drains. Default 60. */
  durationSeconds?: number;
  /** Prompt tokens per request. */
  inputTokens: TokenDistribution;
  /** Output tokens each request produces (it ends on its own after them). */
  outputTokens: TokenDistribution;
  /**
   * The output limit requests send (tokens), which the replica's KV admission reserves. Default:
   * each request's drawn output length (a client that knows its length exactly); a larger fixed
   * limit makes KV memory bind sooner, as real limits do.
   */
  maxOutputTokens?: number;
  /** PRNG seed (arrivals from `seed`, lengths from a derived stream). Default 1. */
  seed?: number;
}

/** One completed request. Times in ms from the start of the run. */
export interface RequestResult {
  /** Arrival order, 0-based. */
  id: number;
  /** Index of the replica that served it. */
  replica: number;
  arrivalMs: number;
  inputTokens: number;
  outputTokens: number;
  /** Arrival to admission into the batch (the start of the step that prefilled it). */
  queueMs: number;
  /** Arrival to its first output token. */
  ttftMs: number;
  /** (last token − first token) / (outputTokens − 1): the request-level time per output token; null for 1 token. */
  tpotMs: number | null;
  /** Arrival to its last token. */
  e2eMs: number;
}

/** The resource that limited the run most; see {@link SimulationReport.bindingConstraint}. */
export type BindingConstraint = 'prefill' | 'kv_memory' | 'decode';

/** What {@link simulateCluster} reports. Times in ms, rates per second. */
export interface SimulationReport {
  replicas: number;
  offeredRps: number;
  durationSeconds: number;
  /** Requests that arrived. */
  arrived: number;
  /** Requests whose whole context (input + output limit) exceeds a replica's KV cache: never admitted. */
  rejected: number;
  /** Per completed request, in arrival order. */
  requests: RequestResult[];
  ttftMs: Percentiles;
  tpotMs: Percentiles;
  queueMs: Percentiles;
  e2eMs: Percentiles;
  /** End of the last request (ms from the start). */
  makespanMs: number;
  /** Output tokens produced ÷ the makespan (tokens/s). */
  outputTokensPerSecond: number;
  /** Prompt tokens prefilled ÷ the makespan (tokens/s). */
  prefillTokensPerSecond: number;
  /** Peak of Σ(input + generated) over a replica's batch ÷ `kvTokens` (0–1), over all replicas and steps. */
  maxKvUtilization: number;
  /** Peak of Σ(input + output limit) over a replica's batch ÷ `kvTokens` (0–1): the reservation. */
  maxKvReservedUtilization: number;
  /** Largest batch seen. */
  maxBatch: number;
  /** Σ step time of all replicas ÷ (replicas × makespan): how busy the fleet was (0–1). */
  busyFraction: number;
  /** Of the busy time, the share spent in prefill (0–1); the rest is decode. */
  prefillShare: number;
  /** Σ duration of steps at which waiting work was held back by the KV cache (ms, summed over replicas). */
  kvBlockedMs: number;
  /** Σ duration of steps at which waiting work was held back by `maxSequences` (ms, summed over replicas). */
  sequenceBlockedMs: number;
  /**
   * Which constraint bound: `kv_memory` when work waited on the KV cache for longer than it
   * waited on batch slots (and did wait); otherwise `prefill` when prefill took more of the
   * busy time than decode, else `decode` (batch slots full counts as decode: the batch is the
   * decode capacity).
   */
  bindingConstraint: BindingConstraint;
}

interface Tracked {
  id: number;
  replica: number;
  arrivalMs: number;
  inputTokens: number;
  outputTokens: number;
  maxOutputTokens: number;
  admittedMs?: number;
  firstTokenMs?: number;
}

interface ReplicaRun {
  state: ReplicaState;
  /** End of the step in flight; undefined when idle. */
  stepEndsMs?: number;
  /** Prefill not yet done + output limit not yet produced, of the sequences it holds (tokens). */
  outstanding: number;
}

/** A replica's step in flight, keyed by when it ends. */
interface StepEnd {
  endsMs: number;
  replica: number;
}

const before = (a: StepEnd, b: StepEnd): boolean => a.endsMs < b.endsMs || (a.endsMs === b.endsMs && a.replica < b.replica);

/** Adds to a binary min-heap ordered by end time, then replica index. */
function pushStep(heap: StepEnd[], endsMs: number, replica: number): void {
  const item = { endsMs, replica };
  let i = heap.length;
  heap.push(item);
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (!before(item, heap[parent])) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = item;
}

/** Removes and returns the earliest entry of a non-empty heap. */
function popStep(heap: StepEnd[]): StepEnd {
  const top = heap[0];
  const last = heap.pop() as StepEnd;
  if (heap.length > 0) {
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const child = left + 1 < heap.length && before(heap[left + 1], heap[left]) ? left + 1 : left;
      if (!before(heap[child], last)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = last;
  }
  return top;
}

/**
 * The replica with the smallest value (ties → the lowest index, as a scan from index 0 keeping
 * the first strict minimum would answer), for dispatch by fewest outstanding tokens. A min
 * segment tree updated lazily: `changed(i)` only marks replica `i`, and `least()` first repairs
 * the marked paths (O(log n) each) or, when most replicas changed, rebuilds the tree (O(n)), so
 * an arrival never costs more than a scan of every replica and usually far less.
 */
function createLeastTracker(n: number, valueOf: (i: number) => number): { changed(i: number): void; least(): number } {
  let size = 1;
  let depth = 0;
  while (size < n) {
    size *= 2;
    depth += 1;
  }
  // node → the index of its subtree's minimum; -1 for padding past the last replica.
  const node = new Int32Array(2 * size).fill(-1);
  const pick = (a: number, b: number): number => (b < 0 || (a >= 0 && valueOf(a) <= valueOf(b)) ? a : b);
  for (let i = 0; i < n; i += 1) node[size + i] = i;
  const rebuild = (): void => {
    for (let k = size - 1; k >= 1; k -= 1) node[k] = pick(node[2 * k], node[2 * k + 1]);
  };
  rebuild();
  const marked = new Uint8Array(n);
  const pending: number[] = [];
  return {
    changed(i) {
      if (marked[i] === 0) {
        marked[i] = 1;
        pending.push(i);
      }
    },
    least() {
      if (pending.length * depth >= n) rebuild();
      else for (const i of pending) for (let k = (size + i) >> 1; k >= 1; k >>= 1) node[k] = pick(node[2 * k], node[2 * k + 1]);
      for (const i of pending) marked[i] = 0;
      pending.length = 0;
      return node[1];
    },
  };
}

/**
 * Validates the input.
 * @throws CapacityInputError naming the field.
 */
export function validateSimulationInput(input: SimulationInput): void {
  validateProfile(input.profile);
  requirePositive('replicas', input.replicas, { integer: true });
  requirePositive('rps', input.rps);
  if (input.durationSeconds !== undefined) requirePositive('durationSeconds', input.durationSeconds);
  validateDistribution('inputTokens', input.inputTokens);
  validateDistribution('outputTokens', input.outputTokens);
  if (input.maxOutputTokens !== undefined) requirePositive('maxOutputTokens', input.maxOutputTokens, { integer: true });
  if (input.seed !== undefined && !Number.isInteger(input.seed)) throw new CapacityInputError('seed', `must be an integer (got ${input.seed})`);
}

/**
 * Runs the simulation: Poisson arrivals at `rps` over `durationSeconds` (gaps exponential, seeded),
 * each with drawn input and output lengths, dispatched on arrival to the replica with the fewest
 * outstanding tokens (prefill not yet done + output limit not yet produced; ties → the lowest
 * index), each replica stepping as {@link beginStep} describes. Events at the same instant: step
 * ends first, then arrivals. The run continues until every admitted request has finished.
 *
 * @throws CapacityInputError naming the field when an input is invalid.
 */
export function simulateCluster(input: SimulationInput): SimulationReport {
  validateSimulationInput(input);
  const { profile, replicas: n, rps } = input;
  const durationSeconds = input.durationSeconds ?? 60;
  const seed = input.seed ?? 1;
  const arrivalsRandom = createRandom(seed);
  const lengthsRandom = createRandom(seed ^ 0x9e3779b9);

  const arrivals: Tracked[] = [];
  for (let t = exponential(arrivalsRandom, rps) * 1000; t < durationSeconds * 1000; t += exponential(arrivalsRandom, rps) * 1000) {
    const inputTokens = drawTokens(input.inputTokens, lengthsRandom);
    const outputTokens = drawTokens(input.outputTokens, lengthsRandom);
    const maxOutputTokens = Math.max(outputTokens, input.maxOutputTokens ?? outputTokens);
    arrivals.push({ id: arrivals.length, replica: -1, arrivalMs: t, inputTokens, outputTokens, maxOutputTokens });
  }

  const runs: ReplicaRun[] = Array.from({ length: n }, () => ({ state: IDLE_REPLICA, outstanding: 0 }));
  const results: RequestResult[] = [];
  let rejected = 0;
  let makespanMs = 0;
  let outputTokens = 0;
  let prefillTokens = 0;
  let prefillTotalMs = 0;
  let decodeTotalMs = 0;
  let kvBlockedMs = 0;
  let sequenceBlockedMs = 0;
  let maxKv = 0;
  let maxKvReserved = 0;
  let maxBatch = 0;
  /** The step in flight of every busy replica (one each), earliest first. */
  const nextSteps: StepEnd[] = [];
  /** The replica with the fewest outstanding tokens (ties → the lowest index), kept current on every change. */
  const leastOutstanding = createLeastTracker(n, (i) => runs[i].outstanding);

  const start = (r: number, now: number): void => {
    const run = runs[r];
    const planned = beginStep(profile, run.state);
    if (!planned) {
      run.stepEndsMs = undefined;
      return;
    }
    const step: ReplicaStep = planned.step;
    run.state = planned.state;
    run.stepEndsMs = now + step.durationMs;
    pushStep(nextSteps, run.stepEndsMs, r);
    for (const s of step.admitted) {
      const tracked = arrivals[Number(s.id)];
      tracked.admittedMs = now;
      run.outstanding -= s.inputTokens;
    }
    prefillTokens += step.prefillTokens;
    prefillTotalMs += step.prefillMs;
    decodeTotalMs += step.decodeMs;
    if (step.blockedBy === 'kv_memory') kvBlockedMs += step.durationMs;
    if (step.blockedBy === 'max_sequences') sequenceBlockedMs += step.durationMs;
    // Context peaks at the end of the step, when every sequence has its new token.
    maxKv = Math.max(maxKv, (kvUsed(run.state) + step.batchSize) / profile.kvTokens);
    maxKvReserved = Math.max(maxKvReserved, kvReserved(run.state) / profile.kvTokens);
    maxBatch = Math.max(maxBatch, step.batchSize);
    leastOutstanding.changed(r);
  };

  let next = 0;
  for (;;) {
    // The earliest step end (ties → the lowest replica index), from a heap: O(log n) per step
    // rather than a scan of every replica, so a run's work does not grow with fleet size × steps.
    const earliest = nextSteps[0];
    const stepEnds = earliest ? earliest.endsMs : Number.POSITIVE_INFINITY;
    const arrives = next < arrivals.length ? arrivals[next].arrivalMs : Number.POSITIVE_INFINITY;
    if (stepEnds === Number.POSITIVE_INFINITY && arrives === Number.POSITIVE_INFINITY) break;
    if (stepEnds <= arrives) {
      const r = popStep(nextSteps).replica;
      const run = runs[r];
      const ended = endStep(run.state);
      run.state = ended.state;
      for (const token of ended.emitted) {
        const t = arrivals[Number(token.id)];
        outputTokens += 1;
        run.outstanding -= 1;
        if (token.generated === 1) t.firstTokenMs = stepEnds;
        if (token.finished) {
          run.outstanding -= t.maxOutputTokens - token.generated;
          const first = t.firstTokenMs as number;
          results.push({
            id: t.id,
            replica: t.replica,
            arrivalMs: t.arrivalMs,
            inputTokens: t.inputTokens,
            outputTokens: token.generated,
            queueMs: (t.admittedMs as number) - t.arrivalMs,
            ttftMs: first - t.arrivalMs,
            tpotMs: token.generated > 1 ? (stepEnds - first) / (token.generated - 1) : null,
            e2eMs: stepEnds - t.arrivalMs,
          });
          makespanMs = Math.max(makespanMs, stepEnds);
        }
      }
      leastOutstanding.changed(r);
      start(r, stepEnds);
      continue;
    }
    const t = arrivals[next];
    next += 1;
    const sequence = { id: String(t.id), inputTokens: t.inputTokens, maxOutputTokens: t.maxOutputTokens, outputTokens: t.outputTokens };
    if (!fitsReplica(profile, sequence)) {
      rejected += 1;
      continue;
    }
    const best = leastOutstanding.least();
    const run = runs[best];
    t.replica = best;
    run.state = enqueue(profile, run.state, sequence);
    run.outstanding += t.inputTokens + t.maxOutputTokens;
    leastOutstanding.changed(best);
    if (run.stepEndsMs === undefined) start(best, t.arrivalMs);
  }

  results.sort((a, b) => a.id - b.id);
  const busy = prefillTotalMs + decodeTotalMs;
  const bindingConstraint: BindingConstraint =
    kvBlockedMs > 0 && kvBlockedMs > sequenceBlockedMs ? 'kv_memory' : prefillTotalMs > decodeTotalMs ? 'prefill' : 'decode';
  const seconds = makespanMs / 1000;
  return {
    replicas: n,
    offeredRps: rps,
    durationSeconds,
    arrived: arrivals.length,
    rejected,
    requests: results,
    ttftMs: summarize(results.map((x) => x.ttftMs)),
    tpotMs: summarize(results.flatMap((x) => (x.tpotMs === null ? [] : [x.tpotMs]))),
    queueMs: summarize(results.map((x) => x.queueMs)),
    e2eMs: summarize(results.map((x) => x.e2eMs)),
    makespanMs,
    outputTokensPerSecond: seconds > 0 ? outputTokens / seconds : 0,
    prefillTokensPerSecond: seconds > 0 ? prefillTokens / seconds : 0,
    maxKvUtilization: maxKv,
    maxKvReservedUtilization: maxKvReserved,
    maxBatch,
    busyFraction: makespanMs > 0 ? busy / (n * makespanMs) : 0,
    prefillShare: busy > 0 ? prefillTotalMs / busy : 0,
    kvBlockedMs,
    sequenceBlockedMs,
    bindingConstraint,
  };
}
