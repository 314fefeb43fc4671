import type { UsageRecord } from '@weir/core';

/**
 * A valid {@link UsageRecord} for tests: `generationId` `gen_<tag>_<i>`, tenant `t<i % 3>`,
 * token counts and cost derived from `i`, dates 1 s apart from 2026-01-01T00:00:00.000Z (ms
 * precision, so they survive ISO round trips). Overrides win.
 */
export function buildUsageRecord(i: number, overrides: Partial<UsageRecord> = {}, tag = 'test'): UsageRecord {
  const startedAt = new Date(Date.UTC(2026, 0, 1) + i * 1_000);
  return {
    generationId: `gen_${tag}_${i}`,
    requestId: `req_${tag}_${i}`,
    tenantId: `t${i % 3}`,
    appId: 'app_1',
    apiKeyId: 'key_1',
    route: i % 2 === 0 ? 'generations' : 'chat.completions',
    modelAlias: 'tiny',
    modelRevision: 'tiny@1',
    inputTokens: 10 + i,
    outputTokens: 20 + i,
    cachedInputTokens: i % 4,
    costNanoUsd: 1_000 * (i + 1),
    status: 'completed',
    finishReason: 'stop',
    errorCode: null,
    queueMs: 1.5,
    ttftMs: i % 5 === 0 ? null : 12,
    totalMs: 120,
    startedAt,
    finishedAt: new Date(startedAt.getTime() + 120),
    ...overrides,
  };
}

/**
 * Polls `predicate` every `intervalMs` (default 5) until it returns true; rejects with
 * `message` after `timeoutMs` (default 5,000).
 */
export async function waitUntil(predicate: () => boolean, timeoutMs = 5_000, message = 'condition not met', intervalMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`waitUntil timed out after ${timeoutMs} ms: ${message}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** A short random tag (lowercase letters and digits) for names that must not collide across runs. */
export function uniqueTag(): string {
  return `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}
