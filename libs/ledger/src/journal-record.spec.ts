import { buildClaimMark, buildProgressMark, buildReservationRef, buildSettlementEntry } from '@weir/testing';
import { type JournalRecord, decodeJournalRecord, encodeJournalRecord, journalRecordGeneration, settlementEntryFault } from './journal-record';

describe('journal records', () => {
  const entry = buildSettlementEntry(1, {
    usageSource: 'counted',
    reservation: buildReservationRef('gen_test_1', ['lease_a']),
    attempts: [
      { attempt: 1, revisionId: 'tiny@1', provider: 'llamacpp', outcome: 'failed', errorCode: 'upstream_error', startedAtMs: 1, ttftMs: null, durationMs: 3, inputTokens: 0, outputTokens: 0 },
    ],
  }, 'test', {
    idempotency: {
      tenantId: 't1',
      key: 'k1',
      outcome: { kind: 'result', result: { generationId: 'gen_test_1', requestId: 'k1', route: 'generations', modelRevision: 'tiny@1', createdS: 1, deltas: ['a\nb'], outcome: { finishReason: 'stop' } as never } },
      retainUntilMs: 99,
    },
  });
  const records: [string, JournalRecord][] = [
    ['settle', { kind: 'settle', entry }],
    ['settle (a cache hit)', { kind: 'settle', entry: buildSettlementEntry(4, { cacheHit: 'exact' }) }],
    [
      'settle (token classes)',
      { kind: 'settle', entry: buildSettlementEntry(5, { inputTokens: 4_512, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, outputTokens: 300, reasoningTokens: 256 }) },
    ],
    ['interrupted', { kind: 'interrupted', idempotency: { tenantId: 't', key: 'k', outcome: { kind: 'interrupted', generationId: 'g', message: 'm' }, retainUntilMs: 5, bodySha256: 'x', route: 'completions' } }],
    ['progress', { kind: 'progress', mark: buildProgressMark(2, { reservation: buildReservationRef('gen_test_2') }) }],
    ['claim', { kind: 'claim', claim: buildClaimMark(3) }],
    ['release', { kind: 'release', generationId: 'gen_x' }],
  ];

  it.each(records)('round-trips a %s record exactly, as one line', (_kind, record) => {
    const text = encodeJournalRecord(record);
    expect(text).not.toContain('\n');
    expect(decodeJournalRecord(text)).toEqual({ ok: true, record });
  });

  it('revives the usage record dates', () => {
    const decoded = decodeJournalRecord(encodeJournalRecord({ kind: 'settle', entry }));
    if (!decoded.ok || decoded.record.kind !== 'settle') throw new Error('not decoded');
    expect(decoded.record.entry.usage.startedAt).toBeInstanceOf(Date);
    expect(decoded.record.entry.usage.finishedAt.getTime()).toBe(entry.usage.finishedAt.getTime());
  });

  it.each([
    ['not JSON', '{', 'not JSON'],
    ['an array', '[]', 'not a JSON object'],
    ['another version', '{"v":2,"kind":"release","generationId":"g"}', 'unsupported version v'],
    ['an unknown kind', '{"v":1,"kind":"bill"}', 'unknown kind'],
    ['a usage record with a negative cost', encodeJournalRecord({ kind: 'settle', entry: buildSettlementEntry(1, { costNanoUsd: -1 }) }), 'entry.usage: costNanoUsd must be a non-negative integer'],
    ['a usage record with an unknown status', encodeJournalRecord({ kind: 'settle', entry: buildSettlementEntry(1, { status: 'ok' as never }) }), 'entry.usage: status is not a known status'],
    ['a usage record with an unknown cache tier', encodeJournalRecord({ kind: 'settle', entry: buildSettlementEntry(1, { cacheHit: 'lru' as never }) }), 'entry.usage: cacheHit must be "exact" or "semantic"'],
    ['a reservation without lease ids', encodeJournalRecord({ kind: 'settle', entry: buildSettlementEntry(1, { reservation: { ...buildReservationRef('g'), leaseIds: undefined as never } }) }), 'entry.usage: reservation: leaseIds must be strings'],
    ['a progress mark with fractional tokens', encodeJournalRecord({ kind: 'progress', mark: buildProgressMark(1, { outputTokens: 1.5 }) }), 'mark: outputTokens must be a non-negative integer'],
    ['a claim without a body hash', encodeJournalRecord({ kind: 'claim', claim: buildClaimMark(1, { bodySha256: undefined as never }) }), 'claim: bodySha256 must be a string'],
    ['an interruption without a message', '{"v":1,"kind":"interrupted","idempotency":{"tenantId":"t","key":"k","retainUntilMs":1,"outcome":{"kind":"interrupted","generationId":"g"}}}', 'idempotency: outcome must name its generation and message'],
  ])('refuses %s, naming the field', (_what, text, reason) => {
    expect(decodeJournalRecord(text)).toEqual({ ok: false, reason });
  });

  it('names the generation of every kind', () => {
    expect(records.map(([, r]) => journalRecordGeneration(r))).toEqual(['gen_test_1', 'gen_test_4', 'gen_test_5', 'g', 'gen_test_2', 'gen_test_3', 'gen_x']);
  });

  it.each([
    ['an attempt with an unknown outcome', buildSettlementEntry(1, { attempts: [{ ...attempt(), outcome: 'bogus' as never }] }), 'usage: attempts: outcome must be answered or failed'],
    ['an attempt with fractional tokens', buildSettlementEntry(1, { attempts: [{ ...attempt(), outputTokens: 0.5 }] }), 'usage: attempts: outputTokens must be a non-negative integer'],
    ['a reservation with a bad period', buildSettlementEntry(1, { reservation: buildReservationRef('g', [], { dayStartsOn: '1 Jan' }) }), 'usage: reservation: monthStartsOn and dayStartsOn must be YYYY-MM-DD'],
    ['an unknown finish reason', buildSettlementEntry(1, { finishReason: 'done' as never }), 'usage: finishReason is not a known reason'],
    ['negative reasoning tokens', buildSettlementEntry(1, { reasoningTokens: -1 }), 'usage: reasoningTokens must be a non-negative integer when present'],
    ['fractional cache writes', buildSettlementEntry(1, { cacheWriteInputTokens: 1.5 }), 'usage: cacheWriteInputTokens must be a non-negative integer when present'],
    ['a key without a generation', buildSettlementEntry(1, {}, 'test', { idempotency: { tenantId: 't', key: 'k', outcome: { kind: 'result', result: {} as never }, retainUntilMs: 1 } }), 'idempotency: outcome.result must name its generation'],
  ])('finds a fault in %s before it reaches the applier', (_what, entry, fault) => {
    expect(settlementEntryFault(entry)).toBe(fault);
  });

  it('passes a complete entry', () => {
    expect(settlementEntryFault(entry)).toBeUndefined();
  });
});

function attempt() {
  return { attempt: 1, revisionId: 'a@1', provider: 'x', outcome: 'answered' as const, startedAtMs: 1, ttftMs: null, durationMs: 1, inputTokens: 1, outputTokens: 1 };
}
