/**
 * OpenAI's rate-limit headers (CONVENTIONS.md §2; platform.openai.com/docs/guides/rate-limits):
 * `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset as a Go-style duration.
 */
import type { RateLimitStatus } from '@weir/core';

/**
 * Formats a duration the way Go's `time.Duration.String` does, as OpenAI's reset headers use
 * it: `0s`, `12ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`. Negative and non-finite values are `0s`;
 * milliseconds are rounded up (a client that waits that long finds the window refilled).
 */
export function goDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return '0s';
  const total = Math.ceil(ms);
  if (total < 1000) return `${total}ms`;
  const h = Math.floor(total / 3_600_000);
  const m = Math.floor((total % 3_600_000) / 60_000);
  const sMs = total % 60_000;
  const s = sMs % 1000 === 0 ? String(sMs / 1000) : (sMs / 1000).toFixed(3).replace(/0+$/, '');
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}

/** The `x-ratelimit-*` headers for a status; windows that are not configured are left out. */
export function rateLimitHeaders(status: RateLimitStatus | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!status) return out;
  for (const kind of ['requests', 'tokens'] as const) {
    const w = status[kind];
    if (!w) continue;
    out[`x-ratelimit-limit-${kind}`] = String(Math.floor(w.limit));
    out[`x-ratelimit-remaining-${kind}`] = String(Math.max(0, Math.floor(w.remaining)));
    out[`x-ratelimit-reset-${kind}`] = goDuration(w.resetMs);
  }
  return out;
}
