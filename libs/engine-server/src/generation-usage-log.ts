/**
 * The engine replica's own count per generation, kept for a bounded time so reconciliation can
 * ask "how many tokens did you really produce for generation X?" after the caller that should
 * have billed it (a streaming relay) died mid-stream. Metadata only: counts, never text.
 */

/** How one generation ended on this replica (the engine's reasons, plus `error`). */
export type GenerationEndReason = 'stop' | 'length' | 'content_filter' | 'tool_calls' | 'aborted' | 'error';

/** One generation's counts, as `GET /v1/generations/{id}/usage` serves them. */
export interface GenerationUsage {
  generationId: string;
  /**
   * Prompt tokens the engine evaluated (BOS included), from the engine's final usage; null
   * while the generation runs, or when it failed before reporting usage.
   */
  promptTokens: number | null;
  /** Output tokens produced so far (final once `finished`). */
  completionTokens: number;
  /** True once the generation ended on this replica; the counts no longer change. */
  finished: boolean;
  /** Set when finished. */
  finishReason: GenerationEndReason | null;
  /** Wall-clock ms of the end; null while running. */
  finishedAtMs: number | null;
}

/** Options of {@link createGenerationUsageLog}. */
export interface GenerationUsageLogOptions {
  /** How long a finished generation's counts stay queryable (ms). Default 3,600,000 (1 h). */
  retentionMs?: number;
  /** Most generations kept; the oldest are dropped first. Default 100,000 (about 20 MB). */
  maxEntries?: number;
  /** Wall clock (ms). Default `Date.now`. */
  now?: () => number;
}

/** The log: written by the generation handler, read by the lookup route. */
export interface GenerationUsageLog {
  /** Starts (or restarts, for a reused id) the entry of a generation. */
  start(generationId: string): void;
  /** Adds produced output tokens to a running generation. */
  addOutput(generationId: string, tokens: number): void;
  /**
   * Finishes a generation with the engine's final usage (the usage absent when it failed
   * before reporting any). A second call is ignored.
   */
  finish(generationId: string, reason: GenerationEndReason, usage?: { inputTokens: number; outputTokens: number }): void;
  /** The generation's counts, or undefined when unknown or past retention. */
  get(generationId: string): GenerationUsage | undefined;
  /** Generations held right now (running and finished). */
  size(): number;
}

/** Default retention of finished generations (ms). */
export const DEFAULT_USAGE_RETENTION_MS = 3_600_000;
/** Default bound on kept generations. */
export const DEFAULT_USAGE_MAX_ENTRIES = 100_000;

/**
 * Creates a {@link GenerationUsageLog}: a `Map` in insertion order, pruned on every write, so
 * memory stays bounded at any request rate (at most `maxEntries` entries; finished ones older
 * than `retentionMs` go first).
 */
export function createGenerationUsageLog(options: GenerationUsageLogOptions = {}): GenerationUsageLog {
  const retentionMs = options.retentionMs ?? DEFAULT_USAGE_RETENTION_MS;
  const maxEntries = Math.max(1, options.maxEntries ?? DEFAULT_USAGE_MAX_ENTRIES);
  const now = options.now ?? Date.now;
  const entries = new Map<string, GenerationUsage>();

  const prune = (): void => {
    const cutoff = now() - retentionMs;
    for (const [id, e] of entries) {
      const expired = e.finishedAtMs !== null && e.finishedAtMs < cutoff;
      if (!expired && entries.size <= maxEntries) {
        // Running generations (at most the engine's slots) keep their start position; skip them.
        if (e.finishedAtMs === null) continue;
        break;
      }
      entries.delete(id);
    }
  };

  return {
    start(generationId) {
      entries.delete(generationId);
      entries.set(generationId, { generationId, promptTokens: null, completionTokens: 0, finished: false, finishReason: null, finishedAtMs: null });
      prune();
    },
    addOutput(generationId, tokens) {
      const e = entries.get(generationId);
      if (e && !e.finished) e.completionTokens += tokens;
    },
    finish(generationId, reason, usage) {
      const e = entries.get(generationId);
      if (!e || e.finished) return;
      e.finished = true;
      e.finishReason = reason;
      e.finishedAtMs = now();
      if (usage) {
        e.promptTokens = usage.inputTokens;
        e.completionTokens = usage.outputTokens;
      }
      // Re-insert so the Map stays ordered by end time, which pruning relies on.
      entries.delete(generationId);
      entries.set(generationId, e);
      prune();
    },
    get(generationId) {
      const e = entries.get(generationId);
      if (!e) return undefined;
      if (e.finishedAtMs !== null && e.finishedAtMs < now() - retentionMs) return undefined;
      return { ...e };
    },
    size: () => entries.size,
  };
}
