/**
 * Reconciliation (issue 4, deliverable 9): the ledger's totals against an independent count —
 * the usage event stream and the engines' own token counters — and every ledger cost against
 * its tokens × the revision's prices. Pure: the caller reads the ledger, the stream and the
 * engines (adapters in `@weir/reconcile`) and hands the data in; nothing here does I/O.
 */
import type { RevisionPricing, UsageSource } from '@weir/core';
import { priceUsage } from './pricing';

/** Token and cost sums. Tokens are counts; cost is integer nano-USD (1e-9 USD). */
export interface UsageTally {
  records: number;
  inputTokens: number;
  outputTokens: number;
  /** Of `inputTokens`, tokens served from a prompt cache. */
  cachedInputTokens: number;
  costNanoUsd: number;
}

/** The counts of one usage record (tokens; cost in integer nano-USD). */
export interface RecordCounts {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  costNanoUsd: number;
}

/** One `usage_ledger` row, as reconciliation reads it. */
export interface LedgerUsageRow extends RecordCounts {
  generationId: string;
  tenantId: string;
  modelRevision: string;
  /**
   * Still a best knowledge (a relay was lost mid-stream, or recovery billed an abandoned
   * generation from its last progress mark) that no engine's count has settled.
   */
  uncertain: boolean;
  /** How the tokens were counted (`usage_source`). */
  usageSource?: UsageSource;
  /** Of `inputTokens`, those written to a prompt cache (`cache_write_input_tokens`, migration 0017); absent: 0. Priced by (d). */
  cacheWriteInputTokens?: number;
  /** Of `outputTokens`, reasoning tokens (`reasoning_tokens`, migration 0017); absent: 0. Priced by (d). */
  reasoningTokens?: number;
  /** When the generation finished: the row's prices are the revision's at that time. */
  finishedAt?: Date;
  /**
   * Set when reconciliation settled the row from an engine's count: the counts as first
   * recorded, which are what the usage stream carries for this generation.
   */
  recorded?: RecordCounts;
}

/** One usage record read from the usage stream (already deduplicated by generation id). */
export interface StreamUsageRecord extends RecordCounts {
  generationId: string;
  tenantId: string;
  modelRevision: string;
}

/** One engine replica's own counters (monotonic since the replica started; tokens). */
export interface EngineCounterSample {
  replicaId: string;
  revisionId: string;
  /** Prompt tokens evaluated. */
  inputTokens: number;
  /** Output tokens produced. */
  outputTokens: number;
}

/** What {@link reconcileUsage} compares. */
export interface ReconcileUsageInput {
  /** The ledger's rows in the window. */
  ledger: readonly LedgerUsageRow[];
  /** The usage stream's records in the same window, one per generation; omit to skip (b). */
  stream?: readonly StreamUsageRecord[];
  /**
   * The engines' counters, for revisions whose every replica started fresh for the window (a
   * counter covers everything since its replica started, so it is comparable with the
   * ledger's window only then); omit to skip (c). Revisions without a sample are not compared.
   */
  engines?: readonly EngineCounterSample[];
  /** Prices by revision id (USD per million tokens). A ledger row of an unknown revision is a difference. */
  pricing: ReadonlyMap<string, RevisionPricing>;
  /**
   * The prices of one row, when they depend on more than its revision (e.g. the configuration
   * snapshot current when it finished); overrides `pricing`. Undefined: the revision has none.
   */
  priceOf?: (row: LedgerUsageRow) => RevisionPricing | undefined;
  /** Most generation ids listed per kind of difference. Default 20. */
  maxListed?: number;
}

/** Ledger sums of one (tenant, revision). */
export interface GroupTally extends UsageTally {
  tenantId: string;
  modelRevision: string;
}

/** A ledger row whose cost is not its tokens × its revision's prices. */
export interface CostMismatch {
  generationId: string;
  modelRevision: string;
  ledgerNanoUsd: number;
  /** `priceUsage(prices, tokens)`; null when the revision has no prices. */
  expectedNanoUsd: number | null;
}

/** A generation whose ledger counts differ from its usage-stream record. */
export interface StreamMismatch {
  generationId: string;
  ledger: RecordCounts;
  stream: RecordCounts;
}

/** The stream side of the report. */
export interface StreamComparison {
  ok: boolean;
  /** Stream sums per (tenant, revision). */
  groups: GroupTally[];
  totals: UsageTally;
  /** Generations in the stream and not in the ledger (count, then the first `maxListed` ids). */
  missingInLedger: { count: number; ids: string[] };
  /** Generations in the ledger and not in the stream. */
  missingInStream: { count: number; ids: string[] };
  /** Generations in both whose counts differ. */
  differing: { count: number; items: StreamMismatch[] };
}

/** The engine side of the report, per revision. */
export interface EngineComparison {
  revisionId: string;
  replicas: string[];
  engine: { inputTokens: number; outputTokens: number };
  ledger: { inputTokens: number; outputTokens: number };
  ok: boolean;
}

/** The outcome of {@link reconcileUsage}. */
export interface UsageReconciliation {
  /** True when every comparison made agrees exactly. */
  ok: boolean;
  /** Ledger sums per (tenant, revision), sorted. */
  ledger: GroupTally[];
  ledgerTotals: UsageTally;
  /**
   * (d): ledger cost vs tokens × prices, row by row. `capped` counts rows still `uncertain`
   * whose cost is below tokens × prices: a recovered estimate is billed at most its
   * reservation's worst case (ADR 0002 §3), so that is not a difference.
   */
  cost: { ok: boolean; expectedNanoUsd: number; capped: number; mismatches: { count: number; items: CostMismatch[] } };
  /** Rows still `uncertain`. */
  uncertain: { count: number; ids: string[] };
  stream?: StreamComparison;
  engines?: EngineComparison[];
  /** One readable line per difference found (empty when `ok`). */
  differences: string[];
}

const emptyTally = (): UsageTally => ({ records: 0, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, costNanoUsd: 0 });

function add(t: UsageTally, c: RecordCounts): void {
  t.records += 1;
  t.inputTokens += c.inputTokens;
  t.outputTokens += c.outputTokens;
  t.cachedInputTokens += c.cachedInputTokens;
  t.costNanoUsd += c.costNanoUsd;
  if (!Number.isSafeInteger(t.costNanoUsd) || !Number.isSafeInteger(t.inputTokens) || !Number.isSafeInteger(t.outputTokens)) {
    throw new RangeError('a reconciliation sum exceeds Number.MAX_SAFE_INTEGER; use a smaller window');
  }
}

function groupBy(records: Iterable<RecordCounts & { tenantId: string; modelRevision: string }>): { groups: GroupTally[]; totals: UsageTally } {
  const byKey = new Map<string, GroupTally>();
  const totals = emptyTally();
  for (const r of records) {
    const key = `${r.tenantId}\u0000${r.modelRevision}`;
    let g = byKey.get(key);
    if (!g) byKey.set(key, (g = { tenantId: r.tenantId, modelRevision: r.modelRevision, ...emptyTally() }));
    add(g, r);
    add(totals, r);
  }
  const groups = [...byKey.values()].sort((a, b) => a.tenantId.localeCompare(b.tenantId) || a.modelRevision.localeCompare(b.modelRevision));
  return { groups, totals };
}

const sameCounts = (a: RecordCounts, b: RecordCounts): boolean =>
  a.inputTokens === b.inputTokens && a.outputTokens === b.outputTokens && a.cachedInputTokens === b.cachedInputTokens && a.costNanoUsd === b.costNanoUsd;

const counts = (r: RecordCounts): RecordCounts => ({
  inputTokens: r.inputTokens,
  outputTokens: r.outputTokens,
  cachedInputTokens: r.cachedInputTokens,
  costNanoUsd: r.costNanoUsd,
});

/**
 * Compares, exactly:
 * - (a) the ledger's sums per (tenant, revision): records, input/output/cached tokens, cost;
 * - (b) against the usage stream, generation by generation (a row settled by reconciliation is
 *   compared by its `recorded` counts, which are what the stream carries): missing on either
 *   side or differing counts are differences, and so the stream's sums equal the ledger's;
 * - (c) per revision, the sum of its replicas' counters against the ledger's input and output
 *   tokens of that revision (all tenants);
 * - (d) every row's cost against `priceUsage(revision prices, row tokens)` — per row, as the
 *   relay priced it, so the sum carries no rounding difference; a row still `uncertain` may cost
 *   less (a recovered estimate is capped at its reservation's worst case).
 * Rows still `uncertain` are listed but are not a difference by themselves (the caller says
 * whether an engine could have settled them).
 * @throws RangeError when a sum exceeds Number.MAX_SAFE_INTEGER (a window of ~9 million USD).
 */
export function reconcileUsage(input: ReconcileUsageInput): UsageReconciliation {
  const maxListed = input.maxListed ?? 20;
  const differences: string[] = [];
  const { groups, totals } = groupBy(input.ledger);

  // (d) cost = tokens × prices, row by row.
  const costItems: CostMismatch[] = [];
  let costCount = 0;
  let capped = 0;
  let unpricedRows = 0;
  let expectedTotal = 0;
  const unpriced = new Set<string>();
  const priceOf = input.priceOf ?? ((row: LedgerUsageRow) => input.pricing.get(row.modelRevision));
  for (const row of input.ledger) {
    const prices = priceOf(row);
    const expected = prices ? priceUsage(prices, row) : null;
    if (expected === null) {
      unpriced.add(row.modelRevision);
      unpricedRows += 1;
    } else expectedTotal += expected;
    if (expected !== null && row.uncertain && row.costNanoUsd < expected) {
      capped += 1;
      continue;
    }
    if (expected !== row.costNanoUsd) {
      costCount += 1;
      if (costItems.length < maxListed) costItems.push({ generationId: row.generationId, modelRevision: row.modelRevision, ledgerNanoUsd: row.costNanoUsd, expectedNanoUsd: expected });
    }
  }
  for (const revision of [...unpriced].sort()) differences.push(`ledger rows of revision ${revision}, which has no prices in the configuration`);
  const pricedMismatches = costCount - unpricedRows;
  if (pricedMismatches > 0) {
    const priced = costItems.filter((m) => m.expectedNanoUsd !== null);
    differences.push(
      `${pricedMismatches} ledger row(s) whose cost is not tokens × prices, e.g. ` +
        priced.slice(0, 3).map((m) => `${m.generationId}: ${m.ledgerNanoUsd} ≠ ${m.expectedNanoUsd} nano-USD`).join('; '),
    );
  }

  const uncertainIds = input.ledger.filter((r) => r.uncertain).map((r) => r.generationId);

  // (b) the usage stream, generation by generation.
  let stream: StreamComparison | undefined;
  if (input.stream) {
    const ledgerById = new Map(input.ledger.map((r) => [r.generationId, r]));
    const streamIds = new Set<string>();
    const missingInLedger: string[] = [];
    const differing: StreamMismatch[] = [];
    let differingCount = 0;
    for (const s of input.stream) {
      streamIds.add(s.generationId);
      const row = ledgerById.get(s.generationId);
      if (!row) {
        missingInLedger.push(s.generationId);
        continue;
      }
      const ledgerSide = row.recorded ?? counts(row);
      if (!sameCounts(ledgerSide, s)) {
        differingCount += 1;
        if (differing.length < maxListed) differing.push({ generationId: s.generationId, ledger: ledgerSide, stream: counts(s) });
      }
    }
    const missingInStream = input.ledger.filter((r) => !streamIds.has(r.generationId)).map((r) => r.generationId);
    const side = groupBy(input.stream);
    const ok = missingInLedger.length === 0 && missingInStream.length === 0 && differingCount === 0;
    stream = {
      ok,
      groups: side.groups,
      totals: side.totals,
      missingInLedger: { count: missingInLedger.length, ids: missingInLedger.slice(0, maxListed) },
      missingInStream: { count: missingInStream.length, ids: missingInStream.slice(0, maxListed) },
      differing: { count: differingCount, items: differing },
    };
    if (missingInLedger.length > 0) differences.push(`${missingInLedger.length} generation(s) in the usage stream but not in the ledger, e.g. ${missingInLedger.slice(0, 3).join(', ')}`);
    if (missingInStream.length > 0) differences.push(`${missingInStream.length} generation(s) in the ledger but not in the usage stream, e.g. ${missingInStream.slice(0, 3).join(', ')}`);
    if (differingCount > 0) differences.push(`${differingCount} generation(s) whose ledger counts differ from their usage-stream record, e.g. ${differing.slice(0, 3).map((d) => d.generationId).join(', ')}`);
  }

  // (c) the engines' own counters, per revision.
  let engines: EngineComparison[] | undefined;
  if (input.engines) {
    const byRevision = new Map<string, EngineComparison>();
    for (const e of input.engines) {
      let c = byRevision.get(e.revisionId);
      if (!c) byRevision.set(e.revisionId, (c = { revisionId: e.revisionId, replicas: [], engine: { inputTokens: 0, outputTokens: 0 }, ledger: { inputTokens: 0, outputTokens: 0 }, ok: true }));
      c.replicas.push(e.replicaId);
      c.engine.inputTokens += e.inputTokens;
      c.engine.outputTokens += e.outputTokens;
    }
    for (const g of groups) {
      const c = byRevision.get(g.modelRevision);
      if (!c) continue;
      c.ledger.inputTokens += g.inputTokens;
      c.ledger.outputTokens += g.outputTokens;
    }
    engines = [...byRevision.values()].sort((a, b) => a.revisionId.localeCompare(b.revisionId));
    for (const c of engines) {
      c.replicas.sort();
      c.ok = c.engine.inputTokens === c.ledger.inputTokens && c.engine.outputTokens === c.ledger.outputTokens;
      if (!c.ok) {
        differences.push(
          `revision ${c.revisionId}: engines counted ${c.engine.inputTokens} input / ${c.engine.outputTokens} output tokens, the ledger ${c.ledger.inputTokens} / ${c.ledger.outputTokens}`,
        );
      }
    }
  }

  return {
    ok: differences.length === 0,
    ledger: groups,
    ledgerTotals: totals,
    cost: { ok: costCount === 0, expectedNanoUsd: expectedTotal, capped, mismatches: { count: costCount, items: costItems } },
    uncertain: { count: uncertainIds.length, ids: uncertainIds.slice(0, maxListed) },
    ...(stream ? { stream } : {}),
    ...(engines ? { engines } : {}),
    differences,
  };
}

/** Settlement of one `uncertain` ledger row from an engine's own count. */
export interface UncertainSettlement {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /** `priceUsage(prices, tokens)`, integer nano-USD. */
  costNanoUsd: number;
}

/**
 * The settled counts of an `uncertain` row from the engine's own count of the generation:
 * the engine's prompt and completion tokens, the row's cached input tokens (capped at the
 * prompt tokens; the engine does not report a cache), priced with the revision's prices.
 * @throws RangeError when a count is not a non-negative integer or a price is invalid ({@link priceUsage}).
 */
export function settleFromEngineCount(
  pricing: RevisionPricing,
  row: { cachedInputTokens: number },
  engine: { promptTokens: number; completionTokens: number },
): UncertainSettlement {
  const usage = {
    inputTokens: engine.promptTokens,
    outputTokens: engine.completionTokens,
    cachedInputTokens: Math.min(row.cachedInputTokens, engine.promptTokens),
  };
  return { ...usage, costNanoUsd: priceUsage(pricing, usage) };
}
