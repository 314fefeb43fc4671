/**
 * The moderation port (issue 15 items 6–8): engines judge texts; the gateway and the relay run
 * them under a tenant's policy.
 */

/** OpenAI's moderation categories (plus Weir's `custom`, for a tenant's own lists). */
export const MODERATION_CATEGORIES = [
  'harassment',
  'harassment/threatening',
  'hate',
  'hate/threatening',
  'illicit',
  'illicit/violent',
  'self-harm',
  'self-harm/intent',
  'self-harm/instructions',
  'sexual',
  'sexual/minors',
  'violence',
  'violence/graphic',
  'custom',
] as const;

/** A category name: one of {@link MODERATION_CATEGORIES}, or what an upstream engine reports. */
export type ModerationCategory = string;

/** One text's verdict, in the shape of OpenAI's `/v1/moderations` result. */
export interface ModerationResult {
  flagged: boolean;
  /** Category → whether the text falls in it. */
  categories: Record<string, boolean>;
  /** Category → score in [0, 1] (the rules engine says 1 or 0). */
  category_scores: Record<string, number>;
  /** Why it was flagged, without the text (e.g. `list:violence`). Absent when not flagged. */
  reason?: string;
}

/**
 * A moderation engine. `check` judges each text (one result per text, same order), honours
 * `signal` (rejects once it fires), and rejects with an `Error` when the engine fails. Never logs
 * the texts.
 */
export interface ModerationEngine {
  /** The engine's configured name (metrics label). */
  readonly name: string;
  /** `rules` or `openai`. */
  readonly kind: string;
  check(texts: string[], signal: AbortSignal): Promise<ModerationResult[]>;
}

/** What a policy's check decided. */
export interface ModerationVerdict {
  /** The text must not pass. */
  blocked: boolean;
  /** `flagged` (the engine flagged a blocking category), `engine_error` / `timeout` (failed closed), `pass`, `failed_open`. */
  reason: 'pass' | 'flagged' | 'engine_error' | 'timeout' | 'failed_open';
  /** The blocking categories that were flagged (for `flagged`); empty otherwise. */
  categories: string[];
}

/** Metrics of moderation checks (never text in a label). */
export interface ModerationObserver {
  /** A check ended: `stage` input|output, its engine, how long it took (ms) and its verdict. */
  onCheck?(stage: 'input' | 'output' | 'api', engine: string, ms: number, verdict: ModerationVerdict): void;
  /** An engine failed or timed out (before `onCheck` reports the verdict the policy gave it). */
  onFailure?(stage: 'input' | 'output' | 'api', engine: string, failure: ModerationFailure): void;
}

/** Why an engine call failed, without any text: what a warn log line carries. */
export interface ModerationFailure {
  /** `timeout` (the policy's timeout fired) or `engine_error`. */
  reason: 'timeout' | 'engine_error';
  /** The error's class (`Error`, `TypeError`, `AbortError`, ...). */
  errorClass: string;
  /** The upstream's HTTP status, when it answered one. */
  status?: number;
}

/**
 * `observer` plus one warn log line per engine failure or timeout: `{ stage, engine, reason,
 * errorClass, status }` — never the texts, never the error message (it may quote an upstream).
 */
export function logEngineFailures<O extends ModerationObserver>(observer: O, logger: { warn(obj: object, msg: string): void }): O & Required<Pick<ModerationObserver, 'onFailure'>> {
  return {
    ...observer,
    onCheck: observer.onCheck?.bind(observer),
    onFailure(stage, engine, failure) {
      observer.onFailure?.(stage, engine, failure);
      logger.warn({ stage, engine, ...failure }, 'moderation engine failed');
    },
  };
}
