/**
 * Settles `uncertain` ledger rows (a relay lost mid-stream; the gateway recorded what it had
 * relayed) from the engine replicas' own count of the generation.
 */
import type { RevisionPricing } from '@weir/core';
import { type RecordCounts, settleFromEngineCount } from '@weir/ledger';
import type { LedgerWindow, ReconcileQueries } from '@weir/store-pg';
import { type GenerationLookup, lookupGenerationUsage } from './engine-client';

/** An engine replica reconciliation may ask. */
export interface EngineEndpoint {
  /** Replica id (from the configuration), or the URL for an engine given on the command line. */
  replicaId: string;
  /** Base URL (with or without `/v1`). */
  baseUrl: string;
}

/** Options of {@link settleUncertainUsage}. */
export interface SettleUncertainOptions {
  window: LedgerWindow;
  /** Prices by revision id (USD per million tokens). */
  pricing: ReadonlyMap<string, RevisionPricing>;
  /** The replicas of each revision (the configuration's `replicas`). */
  enginesByRevision: ReadonlyMap<string, readonly EngineEndpoint[]>;
  /** Engines asked for every revision, after its own replicas (`--engines`). */
  extraEngines?: readonly EngineEndpoint[];
  /** Write the settlements (true) or only report what would be settled (false). */
  fix: boolean;
}

/** Dependencies of {@link settleUncertainUsage}. */
export interface SettleUncertainDeps {
  queries: Pick<ReconcileQueries, 'listUncertain' | 'settleUncertain'>;
  /** Default {@link lookupGenerationUsage}. */
  lookup?: (baseUrl: string, generationId: string) => Promise<GenerationLookup>;
}

/** One row settled (or, without `fix`, that would be). */
export interface SettledRow {
  generationId: string;
  modelRevision: string;
  /** `engine:<replica id>`. */
  source: string;
  before: RecordCounts;
  after: RecordCounts;
}

/** What {@link settleUncertainUsage} did. */
export interface SettleUncertainResult {
  /** Uncertain rows found in the window. */
  found: number;
  settled: SettledRow[];
  /** Rows another reconciler settled between our read and our write. */
  alreadySettled: string[];
  /** Rows no engine could settle, with each engine's answer. */
  unresolved: { generationId: string; modelRevision: string; reason: string }[];
}

/**
 * For each uncertain row in the window, asks the revision's replicas (then `extraEngines`) for
 * their own count of the generation; the first that knows it finished settles the row: the
 * engine's prompt and completion tokens, priced with the revision's prices
 * (`settleFromEngineCount`), written with a state-guarded update so it happens exactly once.
 * A row no engine knows (a replica restarted, or past its retention) is left uncertain and
 * reported.
 * @throws the store's error when the database fails.
 */
export async function settleUncertainUsage(options: SettleUncertainOptions, deps: SettleUncertainDeps): Promise<SettleUncertainResult> {
  const lookup = deps.lookup ?? ((url: string, id: string) => lookupGenerationUsage(url, id));
  const rows = await deps.queries.listUncertain(options.window);
  const result: SettleUncertainResult = { found: rows.length, settled: [], alreadySettled: [], unresolved: [] };
  for (const row of rows) {
    const prices = options.pricing.get(row.modelRevision);
    if (!prices) {
      result.unresolved.push({ generationId: row.generationId, modelRevision: row.modelRevision, reason: 'the revision has no prices in the configuration' });
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
      const settled = { generationId: row.generationId, modelRevision: row.modelRevision, source, before: countsOf(row), after };
      if (!options.fix || (await deps.queries.settleUncertain({ generationId: row.generationId, ...after, source }))) result.settled.push(settled);
      else result.alreadySettled.push(row.generationId);
      done = true;
      break;
    }
    if (!done) result.unresolved.push({ generationId: row.generationId, modelRevision: row.modelRevision, reason: answers.join('; ') });
  }
  return result;
}

const countsOf = (r: RecordCounts): RecordCounts => ({
  inputTokens: r.inputTokens,
  outputTokens: r.outputTokens,
  cachedInputTokens: r.cachedInputTokens,
  costNanoUsd: r.costNanoUsd,
});
