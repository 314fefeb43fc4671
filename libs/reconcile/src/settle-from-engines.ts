/**
 * Settles ledger rows whose counts are not the upstream's own — `uncertain` (a relay lost
 * mid-stream: the gateway recorded what it had relayed) or `usage_source = 'estimated'`
 * (recovery billed an abandoned generation from its last progress mark) — from the engine
 * replicas' own count of the generation.
 */
import type { OverspendEvent } from '@weir/core';
import { type RecordCounts, settleFromEngineCount } from '@weir/ledger';
import type { LedgerWindow, ReconcileQueries } from '@weir/store-pg';
import { type GenerationLookup, lookupGenerationUsage } from './engine-client';
import { type PriceLookup, priceOf } from './price-book';

/** An engine replica reconciliation may ask. */
export interface EngineEndpoint {
  /** Replica id (from the configuration), or the URL for an engine given on the command line. */
  replicaId: string;
  /** Base URL (with or without `/v1`). */
  baseUrl: string;
}

/** Options of {@link settleFromEngines}. */
export interface SettleFromEnginesOptions {
  window: LedgerWindow;
  /**
   * Prices: a {@link PriceBook} (each row at the prices of the snapshot current when it
   * finished) or one map for every time.
   */
  pricing: PriceLookup;
  /** The replicas of each revision (the configuration's `replicas`). */
  enginesByRevision: ReadonlyMap<string, readonly EngineEndpoint[]>;
  /** Engines asked for every revision, after its own replicas (`--engines`). */
  extraEngines?: readonly EngineEndpoint[];
  /** Write the settlements (true) or only report what would be settled (false). */
  fix: boolean;
}

/** Dependencies of {@link settleFromEngines}. */
export interface SettleFromEnginesDeps {
  queries: Pick<ReconcileQueries, 'listUnsettled' | 'settleFromCount'>;
  /** Default {@link lookupGenerationUsage}. */
  lookup?: (baseUrl: string, generationId: string) => Promise<GenerationLookup>;
}

/** One row settled (or, without `fix`, that would be). */
export interface SettledRow {
  generationId: string;
  modelRevision: string;
  /** How the row had been counted: `estimated`, or the source of a row marked `uncertain`. */
  was: 'estimated' | 'uncertain';
  /** `engine:<replica id>`. */
  source: string;
  before: RecordCounts;
  after: RecordCounts;
  /**
   * Written: true when the cost difference moved through the row's budget rows and leases (a
   * row the settlement applier wrote); false for an older row, whose reservation carries it.
   */
  budgetsMoved?: boolean;
  /** Written: a positive difference its leases no longer held (reclaimed or exhausted). */
  overspends?: OverspendEvent[];
}

/** What {@link settleFromEngines} did. */
export interface SettleFromEnginesResult {
  /** Uncertain or estimated rows found in the window. */
  found: number;
  settled: SettledRow[];
  /** Rows another reconciler settled between our read and our write. */
  alreadySettled: string[];
  /** Rows no engine could settle, with each engine's answer. */
  unresolved: { generationId: string; modelRevision: string; reason: string }[];
}

/**
 * For each uncertain or estimated row in the window, asks the revision's replicas (then
 * `extraEngines`) for their own count of the generation; the first that knows it finished
 * settles the row: the engine's prompt and completion tokens, priced with the revision's prices
 * at the row's time (`settleFromEngineCount`), written exactly once with `usage_source =
 * 'reported'` (`settleFromCount`, which also moves the cost difference through the row's budget
 * rows and leases). A row no engine knows (an in-process engine, a replica restarted, past its
 * retention) is left as it is and reported.
 * @throws the store's error when the database fails.
 */
export async function settleFromEngines(options: SettleFromEnginesOptions, deps: SettleFromEnginesDeps): Promise<SettleFromEnginesResult> {
  const lookup = deps.lookup ?? ((url: string, id: string) => lookupGenerationUsage(url, id));
  const rows = await deps.queries.listUnsettled(options.window);
  const result: SettleFromEnginesResult = { found: rows.length, settled: [], alreadySettled: [], unresolved: [] };
  for (const row of rows) {
    const prices = priceOf(options.pricing, row.modelRevision, row.finishedAt);
    if (!prices) {
      result.unresolved.push({ generationId: row.generationId, modelRevision: row.modelRevision, reason: 'the revision has no prices in any stored configuration' });
      continue;
    }
    const engines = [...(options.enginesByRevision.get(row.modelRevision) ?? []), ...(options.extraEngines ?? [])];
    if (engines.length === 0) {
      result.unresolved.push({ generationId: row.generationId, modelRevision: row.modelRevision, reason: 'no engine replica is known for the revision' });
      continue;
    }
    const answers: string[] = [];
    let done = false;
    for (const engine of engines) {
      const answer = await lookup(engine.baseUrl, row.generationId);
      if (!answer.found) {
        answers.push(`${engine.replicaId}: ${answer.reason}`);
        continue;
      }
      const after = settleFromEngineCount(prices, row, answer);
      const source = `engine:${engine.replicaId}`;
      const settled: SettledRow = {
        generationId: row.generationId,
        modelRevision: row.modelRevision,
        was: row.usageSource === 'estimated' ? 'estimated' : 'uncertain',
        source,
        before: countsOf(row),
        after,
      };
      if (!options.fix) result.settled.push(settled);
      else {
        const written = await deps.queries.settleFromCount({ generationId: row.generationId, ...after, source, usageSource: 'reported' });
        if (written.settled) result.settled.push({ ...settled, budgetsMoved: written.budgetsMoved, overspends: written.overspends });
        else result.alreadySettled.push(row.generationId);
      }
      done = true;
      break;
    }
    if (!done) result.unresolved.push({ generationId: row.generationId, modelRevision: row.modelRevision, reason: answers.join('; ') });
  }
  return result;
}

/**
 * @deprecated The name before estimated rows were settled too: {@link settleFromEngines}.
 * Kept for the admission service until it moves to leases.
 */
export const settleUncertainUsage = settleFromEngines;
/** @deprecated See {@link SettleFromEnginesResult}. */
export type SettleUncertainResult = SettleFromEnginesResult;

const countsOf = (r: RecordCounts): RecordCounts => ({
  inputTokens: r.inputTokens,
  outputTokens: r.outputTokens,
  cachedInputTokens: r.cachedInputTokens,
  costNanoUsd: r.costNanoUsd,
});
