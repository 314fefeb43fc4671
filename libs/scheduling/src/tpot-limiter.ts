/**
 * A replica's admitted batch size, steered by measured time per output token (TPOT).
 *
 * A decode step takes longer the more sequences share it (the serving seed's replica: 20 ms at
 * batch 1, 40 ms at batch 32), and on a busy host it stretches further. The declared `slots`
 * are what a replica *can* hold; a TPOT target says what it *should* hold. This limiter lowers
 * the batch a replica is given while its recent p95 TPOT is above the target and raises it
 * back, one sequence at a time, while the p95 is comfortably below and the replica is full —
 * additive increase, multiplicative decrease (Chiu and Jain, 1989), the loop TCP congestion
 * control and Netflix's concurrency-limits use for latency. Between 0.85 × the target and the
 * target it holds; after {@link HOLDS_BEFORE_PROBE} such windows at a full replica it probes
 * one sequence up anyway, so a target close to the replica's single-sequence TPOT cannot
 * ratchet the batch down for good (the probe is undone by the next decrease if it was wrong).
 *
 * Only generations *granted after the last change* are counted: earlier ones ran (partly) at
 * the old batch size and say nothing about the new one. So each step waits for `minSamples`
 * fresh measurements, which paces the loop by the generations' own length.
 *
 * Pure: no clock of its own (times are passed in, ms), no timers.
 */

/** Options of {@link TpotLimiter}. */
export interface TpotLimiterOptions {
  /** The TPOT the replica's p95 should stay under (ms, > 0). */
  targetMs: number;
  /** The declared slots: the limit never rises above it (≥ 1). */
  maxLimit: number;
  /** Fresh samples needed before a decision. Default 8. */
  minSamples?: number;
  /** Samples kept (the most recent). Default 32. */
  window?: number;
  /** Raise the limit only while the p95 is below this fraction of the target. Default 0.85. */
  increaseBelow?: number;
  /** A decrease multiplies the limit by `target ÷ p95`, clamped to [`minFactor`, `maxFactor`]. Defaults 0.5 and 0.9. */
  minFactor?: number;
  maxFactor?: number;
}

/** Windows of holding at a full replica before the limiter probes one sequence up. */
export const HOLDS_BEFORE_PROBE = 3;

/** What one observation changed. */
export type TpotLimitChange = 'decreased' | 'increased' | undefined;

/**
 * Nearest-rank percentile (`q` in (0, 1]) of a non-empty list: the smallest value with at
 * least `q` of the values at or below it (Hyndman and Fan's definition 1).
 */
export function nearestRankPercentile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/** The limiter of one replica. */
export class TpotLimiter {
  /** Sequences the replica may hold now (1 … maxLimit). */
  limit: number;
  /** When the limit last changed (ms; −Infinity before any change). */
  private changedAt = -Infinity;
  /** Whether the replica was given `limit` sequences since the last change. */
  private saturated = false;
  private samples: number[] = [];
  /** Windows in a row that held at a full replica. */
  private holds = 0;
  private readonly minSamples: number;
  private readonly window: number;
  private readonly increaseBelow: number;
  private readonly minFactor: number;
  private readonly maxFactor: number;

  constructor(private readonly options: TpotLimiterOptions) {
    if (!(options.targetMs > 0)) throw new RangeError(`targetMs must be > 0, got ${options.targetMs}`);
    if (!(options.maxLimit >= 1)) throw new RangeError(`maxLimit must be >= 1, got ${options.maxLimit}`);
    this.limit = Math.floor(options.maxLimit);
    this.minSamples = options.minSamples ?? 8;
    this.window = options.window ?? 32;
    this.increaseBelow = options.increaseBelow ?? 0.85;
    this.minFactor = options.minFactor ?? 0.5;
    this.maxFactor = options.maxFactor ?? 0.9;
  }

  /** Records that the replica now holds `inFlight` sequences (call after each grant). */
  noteInFlight(inFlight: number): void {
    if (inFlight >= this.limit) this.saturated = true;
  }

  /**
   * Records one finished generation's TPOT (ms) and the time it was granted (ms), then decides.
   * Samples from generations granted before the last change are ignored. Returns what changed.
   */
  observe(tpotMs: number, grantedAt: number, now: number): TpotLimitChange {
    if (!(tpotMs >= 0) || !Number.isFinite(tpotMs) || grantedAt < this.changedAt) return undefined;
    this.samples.push(tpotMs);
    if (this.samples.length > this.window) this.samples.shift();
    if (this.samples.length < this.minSamples) return undefined;
    const p95 = nearestRankPercentile(this.samples, 0.95);
    const { targetMs, maxLimit } = this.options;
    if (p95 > targetMs && this.limit > 1) {
      const factor = Math.min(this.maxFactor, Math.max(this.minFactor, targetMs / p95));
      this.change(Math.max(1, Math.min(this.limit - 1, Math.floor(this.limit * factor))), now);
      return 'decreased';
    }
    if (p95 < targetMs * this.increaseBelow && this.saturated && this.limit < maxLimit) {
      this.change(this.limit + 1, now);
      return 'increased';
    }
    if (p95 <= targetMs && this.saturated && this.limit < maxLimit) {
      // Within the target at a full replica: a window of holding; after a few, probe up.
      this.samples = [];
      if (++this.holds >= HOLDS_BEFORE_PROBE) {
        this.change(this.limit + 1, now);
        return 'increased';
      }
    }
    return undefined;
  }

  /** The p95 of the samples held (ms), or undefined when there are none. */
  p95(): number | undefined {
    return this.samples.length === 0 ? undefined : nearestRankPercentile(this.samples, 0.95);
  }

  private change(limit: number, now: number): void {
    this.limit = limit;
    this.changedAt = now;
    this.saturated = false;
    this.samples = [];
    this.holds = 0;
  }
}
