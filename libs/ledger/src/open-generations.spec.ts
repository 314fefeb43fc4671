import { buildClaimMark, buildProgressMark, buildReservationRef, buildSettlementEntry } from '@weir/testing';
import { createOpenGenerations, estimatedUsage, settleAbandoned } from './open-generations';

describe('createOpenGenerations', () => {
  it('opens on a claim or progress, keeps the last mark, and closes on a settlement, interruption or release', () => {
    const open = createOpenGenerations();
    open.note({ kind: 'claim', claim: buildClaimMark(1) });
    open.note({ kind: 'progress', mark: buildProgressMark(1, { outputTokens: 3 }) });
    open.note({ kind: 'progress', mark: buildProgressMark(1, { outputTokens: 9 }) });
    open.note({ kind: 'progress', mark: buildProgressMark(2) });
    open.note({ kind: 'claim', claim: buildClaimMark(3) });
    open.note({ kind: 'progress', mark: buildProgressMark(4) });
    open.note({ kind: 'claim', claim: buildClaimMark(5) });
    expect(open.list().map((g) => [g.generationId, g.claim?.key, g.progress?.outputTokens])).toEqual([
      ['gen_test_1', 'key_test_1', 9],
      ['gen_test_2', undefined, 5],
      ['gen_test_3', 'key_test_3', undefined],
      ['gen_test_4', undefined, 5],
      ['gen_test_5', 'key_test_5', undefined],
    ]);
    open.note({ kind: 'settle', entry: buildSettlementEntry(2) });
    open.note({ kind: 'interrupted', idempotency: { tenantId: 't', key: 'k', outcome: { kind: 'interrupted', generationId: 'gen_test_3', message: 'm' }, retainUntilMs: 1 } });
    open.note({ kind: 'release', generationId: 'gen_test_4' });
    expect(open.list().map((g) => g.generationId)).toEqual(['gen_test_1', 'gen_test_5']);
    expect([open.size, open.has('gen_test_1'), open.has('gen_test_2')]).toEqual([2, true, false]);
  });
});

describe('settleAbandoned', () => {
  const NOW = Date.UTC(2026, 5, 1);

  it('bills the last progress as an estimated, interrupted row and marks its key interrupted', () => {
    const mark = buildProgressMark(1, { outputTokens: 61, costNanoUsd: 7_000, reservation: buildReservationRef('gen_test_1', ['l1']), useCase: 'chat' });
    const claim = buildClaimMark(1);
    const [item] = settleAbandoned([{ generationId: 'gen_test_1', claim, progress: mark }], NOW);
    if (item.kind !== 'settle') throw new Error('expected a settlement');
    expect(item.entry.usage).toMatchObject({
      generationId: 'gen_test_1',
      outputTokens: 61,
      inputTokens: 10,
      costNanoUsd: 7_000,
      status: 'failed',
      finishReason: 'error',
      errorCode: 'interrupted',
      usageSource: 'estimated',
      uncertain: true,
      useCase: 'chat',
      totalMs: 1_500,
      reservation: mark.reservation,
    });
    expect(item.entry.usage.finishedAt.getTime()).toBe(mark.atMs);
    expect(item.entry.idempotency).toEqual({
      tenantId: claim.tenantId,
      key: claim.key,
      outcome: { kind: 'interrupted', generationId: 'gen_test_1', message: expect.stringContaining('after 61 output tokens') },
      retainUntilMs: claim.retainUntilMs,
      bodySha256: claim.bodySha256,
      route: claim.route,
    });
  });

  it("never bills more than the reservation's worst case", () => {
    const usage = estimatedUsage(buildProgressMark(1, { costNanoUsd: 9_000, reservation: buildReservationRef('g', [], { worstCaseNano: 8_000 }) }));
    expect(usage.costNanoUsd).toBe(8_000);
    expect(estimatedUsage(buildProgressMark(1, { costNanoUsd: 9_000 })).costNanoUsd).toBe(9_000);
  });

  it('marks the running attempt failed with interrupted and keeps the earlier ones', () => {
    const failed = { attempt: 1, revisionId: 'a@1', provider: 'x', outcome: 'failed' as const, errorCode: 'upstream_error', startedAtMs: 0, ttftMs: null, durationMs: 5, inputTokens: 0, outputTokens: 0 };
    const running = { ...failed, attempt: 2, revisionId: 'b@1', outcome: 'answered' as const, errorCode: undefined, startedAtMs: 10, ttftMs: 3, durationMs: 0, outputTokens: 5 };
    const usage = estimatedUsage(buildProgressMark(1, { attempts: [failed, running], atMs: 1_010 }));
    expect(usage.attempts).toEqual([failed, { ...running, outcome: 'failed', errorCode: 'interrupted', durationMs: 1_000 }]);
  });

  it('keys a progress-only generation by its mark, retained from now, and leaves unkeyed ones without a key', () => {
    const [keyed, unkeyed] = settleAbandoned(
      [
        { generationId: 'gen_test_1', progress: buildProgressMark(1, { idempotencyKey: 'k1' }) },
        { generationId: 'gen_test_2', progress: buildProgressMark(2) },
      ],
      NOW,
      { retentionMs: 1_000 },
    );
    expect(keyed.kind === 'settle' && keyed.entry.idempotency).toMatchObject({ key: 'k1', tenantId: 't1', retainUntilMs: NOW + 1_000, outcome: { kind: 'interrupted' } });
    expect(unkeyed.kind === 'settle' && unkeyed.entry.idempotency).toBeUndefined();
  });

  it('turns a claim without progress into an interrupted key and no row', () => {
    const claim = buildClaimMark(4);
    expect(settleAbandoned([{ generationId: 'gen_test_4', claim }], NOW)).toEqual([
      {
        kind: 'interrupted',
        idempotency: {
          tenantId: claim.tenantId,
          key: claim.key,
          outcome: { kind: 'interrupted', generationId: 'gen_test_4', message: expect.stringContaining('nothing was billed') },
          retainUntilMs: claim.retainUntilMs,
          bodySha256: claim.bodySha256,
          route: claim.route,
        },
      },
    ]);
  });
});
