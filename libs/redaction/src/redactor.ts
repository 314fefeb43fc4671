import { createHmac, randomBytes } from 'node:crypto';
import { normalizeForScan, originalSpan } from './normalize';
import type { CompiledProfile } from './profiles';
import type { Recognizer, ReplacementMode, Span } from './types';

/** Most characters redacted per call by default; the rest is dropped with a marker. */
export const DEFAULT_MAX_CHARS = 16_384;
/** Default time budget of one call (ms). */
export const DEFAULT_BUDGET_MS = 250;
/** Characters per chunk of `redactChunked` by default. */
export const DEFAULT_CHUNK_CHARS = 16_384;
/** Characters scanned past the cut, so a span that straddles it is still found whole. */
const LOOKAHEAD_CHARS = 512;

/** Options of {@link createRedactor}. */
export interface RedactorOptions {
  /**
   * Most characters of a text redacted and kept (UTF-16 code units); the rest is dropped and
   * replaced by `[TRUNCATED:<n> chars]`. Bounds the work per call. Default 16,384.
   */
  maxChars?: number;
  /**
   * Time budget of one call (ms), checked after each recognizer: over it, the call fails
   * (`timeout`) and the caller logs nothing. Default 250: a guard against pathological input and
   * stalls, far above the ≈ 5 ms a 16 KiB text costs (a cold or loaded process must not lose lines).
   */
  budgetMs?: number;
  /**
   * Key of the HMAC-SHA-256 behind `hash` replacements (`[REDACTED:EMAIL:<12 hex>]`): the same
   * value hashes the same under one key, so logs can be correlated without holding the value.
   * Default a random key per process (hashes correlate within one process only). Use a secret
   * of at least 32 bytes: an unkeyed hash of an e-mail address is reversible by guessing.
   */
  hashKey?: string | Uint8Array;
  /** Monotonic clock (ms). Default `performance.now`. */
  now?: () => number;
}

/** The outcome of one {@link Redactor.redact} call. */
export type RedactionResult =
  | {
      ok: true;
      /** The redacted text (with the truncation marker when it was cut). */
      text: string;
      /** Spans replaced, by type (recognizer id or custom pattern name). */
      counts: Readonly<Record<string, number>>;
      /** Characters dropped past {@link RedactorOptions.maxChars} (0 when none). */
      truncatedChars: number;
    }
  | {
      ok: false;
      /** `timeout`: over the budget; `error`: a recognizer threw. The text must not be logged. */
      reason: 'timeout' | 'error';
      /** The fault, for an error log without content (never its message quoting text). */
      error?: unknown;
    };

/** Redacts text with one profile. Never throws: a failure is a result the caller fails closed on. */
export interface Redactor {
  /** The profile's name. */
  readonly profile: string;
  /** Redacts at most `maxChars` of `text` in one synchronous call (see {@link createRedactor}). */
  redact(text: string): RedactionResult;
  /**
   * The same, in chunks of `chunkChars` (default 16,384) with a turn of the event loop between
   * them, for large texts on a request path (prompts redacted before they go upstream). Each
   * chunk has the whole time budget; a span across a chunk's end is found whole (look-ahead). A
   * chunk starts without the characters before it, so a number cut by a chunk boundary may be
   * redacted where the whole would not be (more redaction, never less).
   */
  redactChunked(text: string, chunkChars?: number): Promise<RedactionResult>;
}

/** The profile shape {@link createRedactor} takes: a compiled profile, or any recognizers (tests inject failing ones). */
export type RedactorProfile = Pick<CompiledProfile, 'name' | 'recognizers'> & { replacement?: ReplacementMode };

/**
 * Creates a redactor over a compiled profile (`compileProfiles`). A call scans at most
 * `maxChars` + 512 characters (so a span across the cut is found whole), normalises them for
 * scanning (`normalizeForScan`: NFKC, Unicode spaces as spaces, zero-width characters dropped),
 * runs every recognizer (each linear) on that copy, maps the spans back to the original text, merges overlapping spans (their union is replaced, tagged by the first), and
 * replaces each with `[REDACTED:<TAG>]` (or `[REDACTED:<TAG>:<hmac>]` in `hash` mode). Work per
 * call is bounded by `maxChars`; time by `budgetMs`.
 */
export function createRedactor(profile: RedactorProfile, options: RedactorOptions = {}): Redactor {
  const maxChars = Math.max(256, options.maxChars ?? DEFAULT_MAX_CHARS);
  const budgetMs = options.budgetMs ?? DEFAULT_BUDGET_MS;
  const now = options.now ?? (() => performance.now());
  const key = options.hashKey ?? randomBytes(32);
  const mode = profile.replacement ?? 'tag';
  const recognizers: readonly Recognizer[] = profile.recognizers;
  const replacement = (span: Span, value: string) =>
    mode === 'hash' ? `[REDACTED:${span.tag}:${createHmac('sha256', key).update(value).digest('hex').slice(0, 12)}]` : `[REDACTED:${span.tag}]`;

  /**
   * Redacts `scanned` and keeps its first `limit` characters (a span that crosses the limit is
   * replaced whole). Returns the text, the counts and how many characters of `scanned` were
   * consumed; `timeout` when over the budget since `started`. Throws on a recognizer's fault.
   */
  const core = (scanned: string, limit: number, started: number): { out: string; counts: Record<string, number>; kept: number } | 'timeout' => {
    const spans: Span[] = [];
    // Recognizers read a normalised copy (NFKC, Unicode spaces, zero-width characters dropped);
    // spans are mapped back to the original, which is what gets replaced.
    const scan = normalizeForScan(scanned);
    for (const r of recognizers) {
      r.find(scan.text, (s, e) => {
        if (!(e > s && s >= 0 && e <= scan.text.length)) return;
        const [start, end] = originalSpan(scan, s, e);
        spans.push({ start, end, type: r.type, tag: r.tag });
      });
      if (now() - started > budgetMs) return 'timeout';
    }
    spans.sort((a, b) => a.start - b.start || b.end - a.end);
    const counts: Record<string, number> = {};
    let out = '';
    let pos = 0;
    for (let k = 0; k < spans.length; k++) {
      const span = spans[k];
      if (span.start >= limit) break;
      let end = span.end;
      // Overlapping spans (a phone inside a card, a key inside a high-entropy run): replace the union.
      while (k + 1 < spans.length && spans[k + 1].start < end) end = Math.max(end, spans[++k].end);
      out += scanned.slice(pos, span.start) + replacement(span, scanned.slice(span.start, end));
      counts[span.type] = (counts[span.type] ?? 0) + 1;
      pos = end;
    }
    // A span that crosses the cut is replaced whole; plain text stops at the cut.
    if (pos < limit) out += scanned.slice(pos, limit);
    if (now() - started > budgetMs) return 'timeout';
    return { out, counts, kept: Math.max(pos, limit) };
  };
  const marker = (dropped: number) => (dropped > 0 ? `[TRUNCATED:${dropped} chars]` : '');

  return {
    profile: profile.name,
    redact(text) {
      try {
        const cut = text.length > maxChars;
        const scanned = cut ? text.slice(0, maxChars + LOOKAHEAD_CHARS) : text;
        const r = core(scanned, cut ? maxChars : scanned.length, now());
        if (r === 'timeout') return { ok: false, reason: 'timeout' };
        const truncatedChars = cut ? Math.max(0, text.length - r.kept) : 0;
        return { ok: true, text: r.out + marker(truncatedChars), counts: r.counts, truncatedChars };
      } catch (error) {
        return { ok: false, reason: 'error', error };
      }
    },
    async redactChunked(text, chunkChars = DEFAULT_CHUNK_CHARS) {
      const chunk = Math.max(1024, chunkChars);
      const total = Math.min(text.length, maxChars);
      const counts: Record<string, number> = {};
      let out = '';
      let pos = 0;
      try {
        while (pos < total) {
          const limit = Math.min(chunk, total - pos);
          const r = core(text.slice(pos, pos + limit + LOOKAHEAD_CHARS), limit, now());
          if (r === 'timeout') return { ok: false, reason: 'timeout' };
          out += r.out;
          for (const [k, v] of Object.entries(r.counts)) counts[k] = (counts[k] ?? 0) + v;
          pos += r.kept;
          // Let other requests run between chunks: a large text never holds the event loop for long.
          if (pos < total) await new Promise<void>((resolve) => setImmediate(resolve));
        }
      } catch (error) {
        return { ok: false, reason: 'error', error };
      }
      const truncatedChars = Math.max(0, text.length - pos);
      return { ok: true, text: out + marker(truncatedChars), counts, truncatedChars };
    },
  };
}
