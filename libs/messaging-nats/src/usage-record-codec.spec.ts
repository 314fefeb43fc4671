import { buildUsageRecord } from '@weir/testing';
import { decodeUsageRecord, encodeUsageRecord } from './usage-record-codec';

const enc = (o: unknown) => new TextEncoder().encode(JSON.stringify(o));

describe('usage record codec', () => {
  it('round-trips every field, dates as ISO strings on the wire', () => {
    for (const r of [
      buildUsageRecord(1),
      buildUsageRecord(5, { ttftMs: null, uncertain: true, status: 'failed', finishReason: 'error', errorCode: 'upstream_error' }),
      buildUsageRecord(6, { useCase: 'support.summaries' }),
      buildUsageRecord(7, { cacheHit: 'exact' }),
      buildUsageRecord(8, { cacheHit: 'semantic' }),
      buildUsageRecord(9, { route: 'embeddings', outputTokens: 0 }),
      buildUsageRecord(10, { inputTokens: 3_100, cachedInputTokens: 2_000, cacheWriteInputTokens: 1_000, outputTokens: 500, reasoningTokens: 400 }),
    ]) {
      const data = encodeUsageRecord(r);
      const wire = JSON.parse(new TextDecoder().decode(data));
      expect(wire.v).toBe(1);
      expect(wire.startedAt).toBe(r.startedAt.toISOString());
      expect(decodeUsageRecord(data)).toEqual({ ok: true, record: r });
    }
  });

  it('ignores unknown fields', () => {
    const wire = JSON.parse(new TextDecoder().decode(encodeUsageRecord(buildUsageRecord(1))));
    const decoded = decodeUsageRecord(enc({ ...wire, futureField: 1 }));
    expect(decoded).toEqual({ ok: true, record: buildUsageRecord(1) });
  });

  const valid = JSON.parse(new TextDecoder().decode(encodeUsageRecord(buildUsageRecord(1))));
  it.each<[string, unknown, RegExp]>([
    ['not JSON', 'nope{', /JSON/],
    ['an array', [], /object/],
    ['no version', { ...valid, v: undefined }, /version/],
    ['version 2', { ...valid, v: 2 }, /version/],
    ['numeric generationId', { ...valid, generationId: 7 }, /generationId/],
    ['empty generationId', { ...valid, generationId: '' }, /generationId/],
    ['unknown route', { ...valid, route: 'moderations' }, /route/],
    ['unknown status', { ...valid, status: 'ok' }, /status/],
    ['unknown finishReason', { ...valid, finishReason: 'eos' }, /finishReason/],
    ['negative tokens', { ...valid, inputTokens: -1 }, /inputTokens/],
    ['fractional cost', { ...valid, costNanoUsd: 1.5 }, /costNanoUsd/],
    ['string tokens', { ...valid, outputTokens: '3' }, /outputTokens/],
    ['bad date', { ...valid, startedAt: 'yesterday' }, /startedAt/],
    ['numeric date', { ...valid, finishedAt: 1 }, /finishedAt/],
    ['numeric errorCode', { ...valid, errorCode: 1 }, /errorCode/],
    ['string uncertain', { ...valid, uncertain: 'yes' }, /uncertain/],
    ['numeric useCase', { ...valid, useCase: 7 }, /useCase/],
    ['malformed useCase', { ...valid, useCase: 'has spaces' }, /useCase/],
    ['null totalMs', { ...valid, totalMs: null }, /totalMs/],
    ['unknown cacheHit', { ...valid, cacheHit: 'maybe' }, /cacheHit/],
  ])('refuses %s', (_name, value, reason) => {
    const data = typeof value === 'string' ? new TextEncoder().encode(value) : enc(value);
    const decoded = decodeUsageRecord(data);
    expect(decoded.ok).toBe(false);
    if (!decoded.ok) expect(decoded.reason).toMatch(reason);
  });

  it('refuses invalid UTF-8 and never echoes values', () => {
    expect(decodeUsageRecord(new Uint8Array([0xff, 0xfe]))).toEqual({ ok: false, reason: 'not UTF-8 JSON' });
    const decoded = decodeUsageRecord(enc({ ...valid, route: 'SECRET-VALUE' }));
    expect(JSON.stringify(decoded)).not.toContain('SECRET-VALUE');
  });
});
