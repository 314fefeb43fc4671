/**
 * Prices as they were: every configuration snapshot the control plane stored names its
 * revisions' prices, so a ledger row is checked (and an estimated row settled) at the prices of
 * the snapshot that was current when it finished — also for a revision the current
 * configuration no longer lists. Pure.
 */
import type { RevisionPricing } from '@weir/core';

/** One snapshot's prices. */
export interface PriceSnapshot {
  version: number;
  /** When the snapshot was issued (it applies from then until the next). */
  issuedAt: Date;
  /** Prices by revision id (USD per million tokens). */
  pricing: ReadonlyMap<string, RevisionPricing>;
}

/** Prices of a revision at a time. */
export interface PriceBook {
  /**
   * The prices of `revisionId` for a row that finished at `at`: those of the latest snapshot
   * issued at or before `at` that lists the revision; for a row older than every snapshot that
   * lists it, the earliest such snapshot's; without `at`, the latest. Undefined when no snapshot
   * lists the revision.
   */
  priceAt(revisionId: string, at?: Date): RevisionPricing | undefined;
  /** Every revision id some snapshot lists, sorted. */
  revisions(): string[];
  /** Snapshots read (1 for a configuration file). */
  readonly snapshots: number;
}

/** Anything reconciliation can take prices from: a book, or one set of prices for every time. */
export type PriceLookup = PriceBook | ReadonlyMap<string, RevisionPricing>;

/** The prices of `revisionId` at `at` from a {@link PriceLookup}. */
export function priceOf(lookup: PriceLookup, revisionId: string, at?: Date): RevisionPricing | undefined {
  return isPriceBook(lookup) ? lookup.priceAt(revisionId, at) : lookup.get(revisionId);
}

function isPriceBook(lookup: PriceLookup): lookup is PriceBook {
  return typeof (lookup as PriceBook).priceAt === 'function';
}

const samePrices = (a: RevisionPricing, b: RevisionPricing) =>
  a.inputPerMTok === b.inputPerMTok &&
  a.outputPerMTok === b.outputPerMTok &&
  a.cachedInputPerMTok === b.cachedInputPerMTok &&
  (a.cacheWriteInputPerMTok ?? a.inputPerMTok) === (b.cacheWriteInputPerMTok ?? b.inputPerMTok) &&
  (a.reasoningPerMTok ?? a.outputPerMTok) === (b.reasoningPerMTok ?? b.outputPerMTok);

/**
 * Builds a {@link PriceBook} from snapshots in any order (sorted by version). Consecutive
 * snapshots with the same prices for a revision are one period.
 */
export function createPriceBook(snapshots: readonly PriceSnapshot[]): PriceBook {
  const byRevision = new Map<string, { fromMs: number; pricing: RevisionPricing }[]>();
  for (const s of [...snapshots].sort((a, b) => a.version - b.version)) {
    for (const [id, pricing] of s.pricing) {
      let periods = byRevision.get(id);
      if (!periods) byRevision.set(id, (periods = []));
      const last = periods[periods.length - 1];
      if (!last || !samePrices(last.pricing, pricing)) periods.push({ fromMs: s.issuedAt.getTime(), pricing });
    }
  }
  return {
    snapshots: snapshots.length,
    priceAt(revisionId, at) {
      const periods = byRevision.get(revisionId);
      if (!periods) return undefined;
      if (!at) return periods[periods.length - 1].pricing;
      const t = at.getTime();
      let found = periods[0];
      for (const p of periods) {
        if (p.fromMs > t) break;
        found = p;
      }
      return found.pricing;
    },
    revisions: () => [...byRevision.keys()].sort(),
  };
}

const price = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);

/**
 * The prices of a stored snapshot's `revisions` section (the configuration file's snake_case
 * shape: `{id, pricing: {input_per_mtok, output_per_mtok, cached_input_per_mtok?,
 * cache_write_input_per_mtok?, reasoning_per_mtok?}}`; cache reads and writes default to input,
 * reasoning to output, as `parseConfig` has it). Entries that are not such objects are
 * skipped and counted: every stored snapshot was validated when it was written, so a skip
 * means a snapshot from a different schema.
 */
export function pricesOfStoredRevisions(revisions: unknown): { pricing: Map<string, RevisionPricing>; skipped: number } {
  const pricing = new Map<string, RevisionPricing>();
  let skipped = 0;
  if (!Array.isArray(revisions)) return { pricing, skipped };
  for (const r of revisions as unknown[]) {
    const rev = r as {
      id?: unknown;
      pricing?: { input_per_mtok?: unknown; output_per_mtok?: unknown; cached_input_per_mtok?: unknown; cache_write_input_per_mtok?: unknown; reasoning_per_mtok?: unknown };
    } | null;
    const input = price(rev?.pricing?.input_per_mtok);
    const output = price(rev?.pricing?.output_per_mtok);
    const orDefault = (v: unknown, fallback: number | undefined) => (v === undefined || v === null ? fallback : price(v));
    const cached = orDefault(rev?.pricing?.cached_input_per_mtok, input);
    const cacheWrite = orDefault(rev?.pricing?.cache_write_input_per_mtok, input);
    const reasoning = orDefault(rev?.pricing?.reasoning_per_mtok, output);
    if (typeof rev?.id !== 'string' || input === undefined || output === undefined || cached === undefined || cacheWrite === undefined || reasoning === undefined) {
      skipped++;
      continue;
    }
    pricing.set(rev.id, { inputPerMTok: input, outputPerMTok: output, cachedInputPerMTok: cached, cacheWriteInputPerMTok: cacheWrite, reasoningPerMTok: reasoning });
  }
  return { pricing, skipped };
}
