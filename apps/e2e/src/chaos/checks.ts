/**
 * The chaos proof's invariants (issue 13, item 8), evaluated on what the run collected: the
 * upstream's own record of every generation (what it produced), the clients' record of every
 * request (what they were answered and told), the kills, the budget samples, and the database
 * read at the end (after the settle period and `npm run reconcile -- --fix`). Pure: evidence in,
 * verdicts out, so each invariant is tested on hand-made evidence (`checks.spec.ts`).
 */
import type { ChaosGeneration } from '@weir/testing';
import type { RequestRecord } from './client';
import type { BudgetSample, FinalState, LedgerRow } from './state';

/** A kill -9 the run did. */
export interface KillEvent {
  target: string;
  /** Epoch ms of the SIGKILL. */
  atMs: number;
}

/** What the checks read. */
export interface ChaosEvidence {
  /** The tenant's monthly budget (nano-USD). */
  budgetNano: number;
  requests: readonly RequestRecord[];
  /** The upstream's record, every generation it saw. */
  generations: readonly ChaosGeneration[];
  kills: readonly KillEvent[];
  /** Processes whose kill loses the counts of what they relay (see `ChaosTopology.countingProcesses`). */
  countingProcesses: readonly string[];
  budgetSamples: readonly BudgetSample[];
  final: FinalState;
  /** `npm run reconcile -- --fix` (undefined: not run). */
  reconcile?: { exitCode: number | null; differences?: readonly unknown[]; stderr?: string };
  /** How long past its expiry a hold may still be held (ms). */
  holdGraceMs: number;
  /** The input tokens Weir reserves for a plan's prompt on a revision (undefined: unknown). */
  reservedInput(planId: string, revisionId: string): number | undefined;
  /**
   * A kill this close after an attempt's end (ms) still counts as killing its counter (the
   * entry may not have left the process yet). Default 1,000.
   */
  killWindowMs?: number;
}

/** One broken invariant, with enough context to reproduce it. */
export interface Violation {
  /** What went wrong, as a short stable key (the report groups by it), e.g. `unbilled`, `lost-row`. */
  kind: string;
  /** A generation id, a request's key, or a sample instant. */
  subject: string;
  message: string;
  context?: string;
}

/** One invariant's verdict. */
export interface InvariantResult {
  name: InvariantName;
  description: string;
  ok: boolean;
  /** How many things it looked at (generations, answered attempts, samples, …). */
  checked: number;
  violations: Violation[];
}

/** The invariants, in report order. */
export const INVARIANTS = {
  'billed-equals-produced':
    'every generation the upstream saw is billed what it produced: exactly where usage reached Weir, ±1 where Weir counted, never more than produced where the counting process was killed (then estimated or absent); a usage_source label never claims more precision than its count has; a generation the upstream never saw bills nothing',
  'input-within-reserved': 'no row bills more input tokens than were reserved for its prompt',
  'answered-exactly-one-row': 'every request whose terminal event a client received has exactly one usage row (0 lost)',
  'no-duplicates': 'no generation id has two rows, and no idempotency key (tenant + request_id) has two rows that both bill',
  'no-holds-past-expiry': 'no reservation held, and no lease of a dead holder outstanding, past its expiry plus grace',
  'budget-never-exceeded': 'at every sample: settled ≤ budget, and settled + reserved + leased ≤ budget',
  'told-equals-billed': 'the usage a client was told equals its row (unless the row is estimated or was settled by reconciliation)',
  'reconcile-clean': '`npm run reconcile -- --fix` runs against the store and exits 0',
} as const;

/** Names of {@link INVARIANTS}. */
export type InvariantName = keyof typeof INVARIANTS;

/** The verdict of a run. */
export interface ChaosVerdict {
  ok: boolean;
  invariants: InvariantResult[];
  stats: Record<string, number>;
}

/** Evaluates every invariant. */
export function checkChaos(e: ChaosEvidence): ChaosVerdict {
  const ctx = indexEvidence(e);
  const invariants = [billedEqualsProduced(e, ctx), inputWithinReserved(e, ctx), answeredExactlyOneRow(e, ctx), noDuplicates(e, ctx), noHoldsPastExpiry(e), budgetNeverExceeded(e), toldEqualsBilled(e, ctx), reconcileClean(e)];
  return { ok: invariants.every((i) => i.ok), invariants, stats: stats(e, ctx) };
}

interface Indexed {
  upstream: Map<string, ChaosGeneration>;
  rowsByGeneration: Map<string, LedgerRow[]>;
  /** Plan id of a generation: from the upstream, else the client that was told it, else its row's key. */
  planOf: Map<string, string>;
  requestByPlan: Map<string, RequestRecord>;
  answered: Map<string, RequestRecord>;
  keys: Map<string, RequestRecord>;
}

function indexEvidence(e: ChaosEvidence): Indexed {
  const upstream = new Map(e.generations.map((g) => [g.generationId, g]));
  const rowsByGeneration = new Map<string, LedgerRow[]>();
  for (const r of e.final.ledger) rowsByGeneration.set(r.generationId, [...(rowsByGeneration.get(r.generationId) ?? []), r]);
  const requestByPlan = new Map(e.requests.map((r) => [r.plan.planId, r]));
  const keys = new Map(e.requests.filter((r) => r.plan.key).map((r) => [r.plan.key as string, r]));
  const planOf = new Map<string, string>();
  const answered = new Map<string, RequestRecord>();
  for (const g of e.generations) if (g.planId) planOf.set(g.generationId, g.planId);
  for (const r of e.requests) {
    for (const a of r.attempts) {
      if (a.generationId && !planOf.has(a.generationId)) planOf.set(a.generationId, r.plan.planId);
      if (a.answered && a.generationId) answered.set(a.generationId, r);
    }
  }
  for (const row of e.final.ledger) {
    const byKey = keys.get(row.requestId);
    if (byKey && !planOf.has(row.generationId)) planOf.set(row.generationId, byKey.plan.planId);
  }
  return { upstream, rowsByGeneration, planOf, requestByPlan, answered, keys };
}

function result(name: InvariantName, checked: number, violations: Violation[]): InvariantResult {
  return { name, description: INVARIANTS[name], ok: violations.length === 0, checked, violations };
}

/** True when a kill of a counting process fell while one of the generation's attempts ran (or just after it ended). */
function killedWhileRunning(e: ChaosEvidence, g: ChaosGeneration | undefined): KillEvent | undefined {
  if (!g) return undefined;
  const window = e.killWindowMs ?? 1_000;
  return e.kills.find(
    (k) => e.countingProcesses.includes(k.target) && g.attempts.some((a) => a.startedAtMs <= k.atMs && k.atMs <= (a.endedAtMs ?? Number.POSITIVE_INFINITY) + window),
  );
}

/** One line on a generation: its plan, the upstream's attempts, the clients' attempts, its row. */
export function describeGeneration(e: ChaosEvidence, ctx: Indexed, generationId: string): string {
  const planId = ctx.planOf.get(generationId);
  const req = planId ? ctx.requestByPlan.get(planId) : undefined;
  const p = req?.plan;
  const parts: string[] = [];
  if (p) {
    const traits = [p.alias, p.route, p.stream ? 'stream' : 'non-stream', p.key ? 'keyed' : 'unkeyed', `max ${p.maxTokens}`, `plan ${p.schedule.tokens} tokens`];
    if (p.schedule.dieAfterTokens !== undefined) traits.push(`dies after ${p.schedule.dieAfterTokens}`);
    if (p.schedule.failAttempts) traits.push(`503 × ${p.schedule.failAttempts}`);
    if (p.deadlineMs !== undefined) traits.push(`deadline ${p.deadlineMs} ms`);
    if (p.cancel) traits.push('afterDeltas' in p.cancel ? `cancel after ${p.cancel.afterDeltas} deltas` : `cancel after ${p.cancel.afterMs} ms`);
    parts.push(`${p.planId} (${traits.join(', ')})`);
  }
  const g = ctx.upstream.get(generationId);
  parts.push(
    g
      ? `upstream: ${g.attempts.map((a) => `#${a.attempt} ${a.replicaId} ${a.ending} produced ${a.produced} usage ${a.usageReported}`).join('; ')}`
      : 'upstream: never saw it',
  );
  if (req) {
    parts.push(
      `client: ${req.attempts
        .map((a) => `#${a.n} ${a.reason} ${a.status ?? a.networkError ?? '?'}${a.generationId === generationId ? '' : a.generationId ? ` (${a.generationId})` : ''}${a.replayed ? ' replayed' : ''}${a.answered ? ` answered ${a.finishReason ?? ''}` : ''}${a.told ? ` told ${a.told.inputTokens}/${a.told.outputTokens}` : ''}${a.errorCode ? ` ${a.errorCode}` : ''}${a.clientCancelled ? ' cancelled' : ''}`)
        .join('; ')}`,
    );
  }
  const rows = ctx.rowsByGeneration.get(generationId) ?? [];
  parts.push(rows.length === 0 ? 'ledger: no row' : `ledger: ${rows.map((r) => `${r.inputTokens}/${r.outputTokens} ${r.usageSource ?? '?'}${r.uncertain ? ' uncertain' : ''} ${r.status} ${r.finishReason}`).join('; ')}`);
  const kill = killedWhileRunning(e, g);
  if (kill) parts.push(`counter killed: ${kill.target} at +${kill.atMs - (g?.attempts[0]?.startedAtMs ?? kill.atMs)} ms`);
  return parts.join(' | ');
}

function billedEqualsProduced(e: ChaosEvidence, ctx: Indexed): InvariantResult {
  const violations: Violation[] = [];
  const ids = new Set([...ctx.upstream.keys(), ...ctx.rowsByGeneration.keys()]);
  for (const id of ids) {
    const g = ctx.upstream.get(id);
    const produced = (g?.attempts ?? []).reduce((n, a) => n + a.produced, 0);
    const row = ctx.rowsByGeneration.get(id)?.[0];
    const killed = killedWhileRunning(e, g);
    const fail = (kind: string, message: string) => violations.push({ kind, subject: id, message, context: describeGeneration(e, ctx, id) });
    if (!row) {
      if (produced > 0 && !killed) fail('unbilled', `produced ${produced} output tokens, billed none (no usage row)`);
      continue;
    }
    if (!g) {
      if (row.outputTokens !== 0 || row.inputTokens !== 0) fail('billed-never-seen', `billed ${row.inputTokens}/${row.outputTokens} tokens for a generation the upstream never saw`);
      continue;
    }
    const d = row.outputTokens - produced;
    // Before migration 0010's column was written, `uncertain` was the mark of an estimate.
    const source = row.uncertain ? 'estimated' : (row.usageSource ?? 'reported');
    // The situation decides the tolerance …
    const reportedToWeir = g.attempts.every((a) => a.produced === 0 || a.usageReported === 'continuous' || (a.usageReported === 'final' && (a.ending === 'finished' || a.ending === 'stopped')));
    if (killed) {
      if (d > 0) fail('over-produced-after-kill', `billed ${row.outputTokens} output tokens, more than the ${produced} produced (its counter was killed)`);
    } else if (reportedToWeir) {
      if (d !== 0) fail(d > 0 ? 'over-billed-reported' : 'under-billed-reported', `billed ${row.outputTokens} output tokens, the upstream produced and reported ${produced}`);
      const answering = [...g.attempts].reverse().find((a) => a.produced > 0);
      if (answering && row.inputTokens !== answering.promptTokens) fail('input-not-reported-count', `billed ${row.inputTokens} input tokens, the upstream reported ${answering.promptTokens}`);
    } else if (Math.abs(d) > 1) {
      fail(d > 0 ? 'over-billed-counted' : 'under-billed-counted', `billed ${row.outputTokens} output tokens, the upstream produced ${produced} (Weir counts: ±1 allowed)`);
    }
    // … and the label may not claim more precision than the count has.
    if (source === 'reported' && d !== 0 && !killed) fail('label-reported-inexact', `usage_source reported, but ${row.outputTokens} ≠ ${produced} produced`);
    if (source === 'counted' && Math.abs(d) > 1 && !killed) fail('label-counted-off', `usage_source counted, but ${row.outputTokens} is more than 1 from ${produced} produced`);
    if (source === 'reported' && !reportedToWeir && !killed) fail('label-reported-without-usage', `usage_source reported, but no usage reached Weir from the upstream (it must have counted: counted or estimated)`);
    if (killed && source !== 'estimated' && d !== 0 && !(source === 'counted' && Math.abs(d) <= 1)) fail('label-not-estimated-after-kill', `usage_source ${source} on a count of ${row.outputTokens} that differs from the ${produced} produced (should say estimated)`);
  }
  return result('billed-equals-produced', ids.size, violations);
}

function inputWithinReserved(e: ChaosEvidence, ctx: Indexed): InvariantResult {
  const violations: Violation[] = [];
  const reservationInput = new Map((e.final.reservations ?? []).map((r) => [r.generationId, r.inputTokens]));
  let checked = 0;
  for (const row of e.final.ledger) {
    const planId = ctx.planOf.get(row.generationId);
    const bound = reservationInput.get(row.generationId) ?? (planId ? e.reservedInput(planId, row.modelRevision) : undefined);
    if (bound === undefined) continue;
    checked += 1;
    if (row.inputTokens > bound) violations.push({ kind: 'input-over-reserved', subject: row.generationId, message: `billed ${row.inputTokens} input tokens, ${bound} were reserved`, context: describeGeneration(e, ctx, row.generationId) });
  }
  return result('input-within-reserved', checked, violations);
}

function answeredExactlyOneRow(e: ChaosEvidence, ctx: Indexed): InvariantResult {
  const violations: Violation[] = [];
  let checked = 0;
  for (const r of e.requests) {
    for (const a of r.attempts) {
      if (!a.answered) continue;
      checked += 1;
      if (!a.generationId) {
        violations.push({ kind: 'answered-without-id', subject: r.plan.planId, message: `attempt #${a.n} was answered without a generation id` });
        continue;
      }
      const n = ctx.rowsByGeneration.get(a.generationId)?.length ?? 0;
      if (n !== 1) violations.push({ kind: n === 0 ? 'lost-row' : 'several-rows', subject: a.generationId, message: `answered (attempt #${a.n}${a.replayed ? ', a replay' : ''}, finish ${a.finishReason ?? '?'}), ${n === 0 ? 'no usage row: lost' : `${n} usage rows`}`, context: describeGeneration(e, ctx, a.generationId) });
    }
  }
  return result('answered-exactly-one-row', checked, violations);
}

function noDuplicates(e: ChaosEvidence, ctx: Indexed): InvariantResult {
  const violations: Violation[] = [];
  for (const [id, rows] of ctx.rowsByGeneration) if (rows.length > 1) violations.push({ kind: 'generation-twice', subject: id, message: `${rows.length} usage rows for one generation id` });
  const byKey = new Map<string, LedgerRow[]>();
  for (const row of e.final.ledger) {
    if (!ctx.keys.has(row.requestId)) continue;
    if (row.inputTokens + row.outputTokens === 0 && row.costNano === 0) continue;
    const k = `${row.tenantId}/${row.requestId}`;
    byKey.set(k, [...(byKey.get(k) ?? []), row]);
  }
  for (const [k, rows] of byKey) {
    if (rows.length < 2) continue;
    violations.push({
      kind: 'key-billed-twice',
      subject: k,
      message: `one idempotency key billed ${rows.length} times: ${rows.map((r) => `${r.generationId} ${r.inputTokens}/${r.outputTokens} ${r.status} ${r.finishReason}`).join(', ')}`,
      context: rows.map((r) => describeGeneration(e, ctx, r.generationId)).join('\n      '),
    });
  }
  return result('no-duplicates', e.final.ledger.length, violations);
}

function noHoldsPastExpiry(e: ChaosEvidence): InvariantResult {
  const violations: Violation[] = [];
  const now = e.final.readAtMs;
  const reservations = e.final.reservations ?? [];
  for (const r of reservations) {
    if (r.state === 'held' && r.expiresAtMs + e.holdGraceMs < now) violations.push({ kind: 'reservation-held', subject: r.generationId, message: `reservation ${r.id} still held ${Math.round((now - r.expiresAtMs) / 1000)} s past its expiry` });
  }
  const leases = e.final.leases ?? [];
  for (const l of leases) {
    const dead = l.holderExpiresAtMs === null || l.holderExpiresAtMs < now;
    const outstanding = l.outstandingNano > 0 || l.slots > 0;
    if (dead && outstanding && l.holdUntilMs + e.holdGraceMs < now) {
      violations.push({ kind: 'dead-holder-lease', subject: l.leaseId, message: `${l.kind} lease of dead holder ${l.holder} on ${l.scope} still outstanding (${l.outstandingNano} nano, ${l.slots} slots) ${Math.round((now - l.holdUntilMs) / 1000)} s past hold_until` });
    }
  }
  return result('no-holds-past-expiry', reservations.length + leases.length, violations);
}

function budgetNeverExceeded(e: ChaosEvidence): InvariantResult {
  const violations: Violation[] = [];
  const samples = [...e.budgetSamples, ...(e.final.budget ? [e.final.budget] : [])];
  for (const s of samples) {
    const usd = (n: number) => `$${(n / 1e9).toFixed(9)}`;
    if (s.settledNano > e.budgetNano) violations.push({ kind: 'settled-over-budget', subject: new Date(s.atMs).toISOString(), message: `${s.source}: settled ${usd(s.settledNano)} > budget ${usd(e.budgetNano)}` });
    else if (s.source === 'db' && s.settledNano + s.reservedNano + s.leasedNano > e.budgetNano) {
      violations.push({ kind: 'held-over-budget', subject: new Date(s.atMs).toISOString(), message: `settled ${usd(s.settledNano)} + reserved ${usd(s.reservedNano)} + leased ${usd(s.leasedNano)} > budget ${usd(e.budgetNano)}` });
    }
  }
  return result('budget-never-exceeded', samples.length, violations);
}

function toldEqualsBilled(e: ChaosEvidence, ctx: Indexed): InvariantResult {
  const violations: Violation[] = [];
  let checked = 0;
  for (const r of e.requests) {
    for (const a of r.attempts) {
      if (!a.answered || !a.told || !a.generationId) continue;
      const row = ctx.rowsByGeneration.get(a.generationId)?.[0];
      if (!row || row.usageSource === 'estimated' || row.uncertain || e.final.reconciled.has(a.generationId)) continue;
      checked += 1;
      if (row.inputTokens !== a.told.inputTokens || row.outputTokens !== a.told.outputTokens) {
        violations.push({ kind: 'told-differs', subject: a.generationId, message: `told ${a.told.inputTokens}/${a.told.outputTokens} (attempt #${a.n}${a.replayed ? ', a replay' : ''}), billed ${row.inputTokens}/${row.outputTokens}`, context: describeGeneration(e, ctx, a.generationId) });
      }
    }
  }
  return result('told-equals-billed', checked, violations);
}

function reconcileClean(e: ChaosEvidence): InvariantResult {
  const r = e.reconcile;
  if (!r) return result('reconcile-clean', 0, [{ kind: 'not-run', subject: 'reconcile', message: 'not run' }]);
  if (r.exitCode === 0) return result('reconcile-clean', 1, []);
  const what = r.differences && r.differences.length > 0 ? `${r.differences.length} differences: ${JSON.stringify(r.differences.slice(0, 5)).slice(0, 1_500)}` : (r.stderr ?? '').trim().split('\n').slice(-3).join(' / ');
  return result('reconcile-clean', 1, [{ kind: 'reconcile-failed', subject: 'reconcile', message: `exit ${r.exitCode}: ${what}` }]);
}

function stats(e: ChaosEvidence, ctx: Indexed): Record<string, number> {
  const attempts = e.requests.flatMap((r) => r.attempts);
  const count = (f: (a: (typeof attempts)[number]) => boolean) => attempts.filter(f).length;
  const upstreamAttempts = e.generations.flatMap((g) => g.attempts);
  return {
    requests: e.requests.length,
    attempts: attempts.length,
    answered: count((a) => a.answered),
    replayed: count((a) => a.replayed),
    networkErrors: count((a) => a.networkError !== undefined),
    clientCancels: count((a) => a.clientCancelled),
    budgetExhausted: count((a) => a.errorCode === 'budget_exhausted'),
    rateLimited: count((a) => a.status === 429 && a.errorCode !== 'budget_exhausted'),
    killSwitched: count((a) => a.errorCode === 'kill_switch'),
    conflicts: count((a) => a.status === 409),
    deadlines: count((a) => a.finishReason === 'deadline' || a.errorCode === 'deadline_exceeded'),
    upstreamGenerations: e.generations.length,
    upstreamAttempts: upstreamAttempts.length,
    upstreamDied: upstreamAttempts.filter((a) => a.ending === 'died').length,
    upstreamRefused: upstreamAttempts.filter((a) => a.ending === 'refused').length,
    upstreamStopped: upstreamAttempts.filter((a) => a.ending === 'stopped').length,
    upstreamClientClosed: upstreamAttempts.filter((a) => a.ending === 'client_closed').length,
    producedTokens: upstreamAttempts.reduce((n, a) => n + a.produced, 0),
    ledgerRows: e.final.ledger.length,
    billedOutputTokens: e.final.ledger.reduce((n, r) => n + r.outputTokens, 0),
    billedNano: e.final.ledger.reduce((n, r) => n + r.costNano, 0),
    budgetNano: e.budgetNano,
    kills: e.kills.length,
    budgetSamples: e.budgetSamples.length,
    estimatedRows: e.final.ledger.filter((r) => r.usageSource === 'estimated' || r.uncertain).length,
    generationsWithoutPlan: [...ctx.upstream.values()].filter((g) => !g.planId).length,
  };
}
