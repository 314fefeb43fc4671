import type { RevisionPricing } from '@weir/core';
import { priceUsage } from './pricing';
import { type LedgerUsageRow, reconcileUsage, settleFromEngineCount, type StreamUsageRecord } from './reconcile';

const cheap: RevisionPricing = { inputPerMTok: 0.1, outputPerMTok: 0.2, cachedInputPerMTok: 0.05 };
const odd: RevisionPricing = { inputPerMTok: 0.1234567, outputPerMTok: 3.333333, cachedInputPerMTok: 0.1234567 };
const pricing = new Map([
  ['r1', cheap],
  ['r2', odd],
]);

function row(id: string, tenantId: string, modelRevision: string, inputTokens: number, outputTokens: number, extra: Partial<LedgerUsageRow> = {}): LedgerUsageRow {
  const prices = pricing.get(modelRevision) ?? cheap;
  return { generationId: id, tenantId, modelRevision, inputTokens, outputTokens, cachedInputTokens: 0, costNanoUsd: priceUsage(prices, { inputTokens, outputTokens }), uncertain: false, ...extra };
}
const asStream = (r: LedgerUsageRow): StreamUsageRecord => ({
  generationId: r.generationId,
  tenantId: r.tenantId,
  modelRevision: r.modelRevision,
  ...(r.recorded ?? { inputTokens: r.inputTokens, outputTokens: r.outputTokens, cachedInputTokens: r.cachedInputTokens, costNanoUsd: r.costNanoUsd }),
});

const ledger = [row('g1', 'a', 'r1', 5, 10), row('g2', 'a', 'r1', 7, 3), row('g3', 'b', 'r2', 11, 13), row('g4', 'a', 'r2', 1, 0)];

describe('reconcileUsage', () => {
  it('agrees when the stream, the engines and the prices all match, and sums per (tenant, revision)', () => {
    const result = reconcileUsage({
      ledger,
      stream: ledger.map(asStream),
      engines: [
        { replicaId: 'r1/0', revisionId: 'r1', inputTokens: 10, outputTokens: 4 },
        { replicaId: 'r1/1', revisionId: 'r1', inputTokens: 2, outputTokens: 9 },
        { replicaId: 'r2/0', revisionId: 'r2', inputTokens: 12, outputTokens: 13 },
      ],
      pricing,
    });
    expect(result.differences).toEqual([]);
    expect(result.ok).toBe(true);
    expect(result.ledger.map((g) => [g.tenantId, g.modelRevision, g.records, g.inputTokens, g.outputTokens])).toEqual([
      ['a', 'r1', 2, 12, 13],
      ['a', 'r2', 1, 1, 0],
      ['b', 'r2', 1, 11, 13],
    ]);
    expect(result.ledgerTotals).toMatchObject({ records: 4, inputTokens: 24, outputTokens: 26 });
    expect(result.stream?.totals).toEqual(result.ledgerTotals);
    expect(result.cost.expectedNanoUsd).toBe(result.ledgerTotals.costNanoUsd);
    expect(result.engines?.map((e) => [e.revisionId, e.replicas, e.ok])).toEqual([
      ['r1', ['r1/0', 'r1/1'], true],
      ['r2', ['r2/0'], true],
    ]);
  });

  it('prices row by row, as the relay does (a total × price would round differently)', () => {
    // 1 input token at 0.1234567 $/MTok (→ 0.123457 µ-priced) is 123.457 nano-USD, billed 123 per row;
    // 9 rows are 1,107 nano-USD, while 9 tokens × the price would be 1,111.
    const rows = Array.from({ length: 9 }, (_, i) => row(`t${i}`, 'a', 'r2', 1, 0));
    expect(rows.every((r) => r.costNanoUsd === 123)).toBe(true);
    const result = reconcileUsage({ ledger: rows, pricing });
    expect(result.ok).toBe(true);
    expect(result.cost.expectedNanoUsd).toBe(1_107);
  });

  it.each([
    ['a cost one nano-USD off', { costNanoUsd: ledger[0].costNanoUsd + 1 }, /1 ledger row\(s\) whose cost is not tokens × prices, e.g. g1/],
    ['an output count changed after pricing', { outputTokens: 11 }, /cost is not tokens × prices/],
  ])('finds %s', (_name, change, message) => {
    const changed = [{ ...ledger[0], ...change }, ...ledger.slice(1)];
    const result = reconcileUsage({ ledger: changed, pricing });
    expect(result.ok).toBe(false);
    expect(result.cost.mismatches.count).toBe(1);
    expect(result.differences.join('\n')).toMatch(message);
  });

  it('prices a row by its token classes (cache writes, reasoning): the classes billed agree, the same row priced without them does not', () => {
    const classes: RevisionPricing = { inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3, cacheWriteInputPerMTok: 3.75, reasoningPerMTok: 20 };
    const tokens = { inputTokens: 4_512, outputTokens: 300, cachedInputTokens: 3_000, cacheWriteInputTokens: 1_500, reasoningTokens: 256 };
    const billed: LedgerUsageRow = { generationId: 'c1', tenantId: 'a', modelRevision: 'rc', ...tokens, costNanoUsd: priceUsage(classes, tokens), uncertain: false };
    const prices = new Map([['rc', classes]]);
    expect(reconcileUsage({ ledger: [billed], pricing: prices }).ok).toBe(true);
    // A row that lost its classes (as read before 0017's columns) no longer matches its cost.
    const { cacheWriteInputTokens: _w, reasoningTokens: _r, ...withoutClasses } = billed;
    const result = reconcileUsage({ ledger: [withoutClasses], pricing: prices });
    expect(result.ok).toBe(false);
    expect(result.cost.mismatches.count).toBe(1);
  });

  it('reports rows of a revision without prices', () => {
    const result = reconcileUsage({ ledger: [row('x', 'a', 'gone@1', 1, 1)], pricing });
    expect(result.differences).toEqual(['ledger rows of revision gone@1, which has no prices in the configuration']);
    expect(result.cost.mismatches.items).toEqual([{ generationId: 'x', modelRevision: 'gone@1', ledgerNanoUsd: expect.any(Number), expectedNanoUsd: null }]);
  });

  it('accepts an uncertain estimate billed below tokens × prices (capped at its worst case), and nothing else below or above', () => {
    const capped = row('e1', 'a', 'r1', 100, 1_000, { uncertain: true, usageSource: 'estimated' });
    const below = { ...capped, costNanoUsd: capped.costNanoUsd - 50 };
    expect(reconcileUsage({ ledger: [below], pricing })).toMatchObject({ ok: true, cost: { ok: true, capped: 1, expectedNanoUsd: capped.costNanoUsd } });
    // Above tokens × prices, or below for a certain row, is a difference.
    expect(reconcileUsage({ ledger: [{ ...capped, costNanoUsd: capped.costNanoUsd + 1 }], pricing }).cost).toMatchObject({ ok: false, capped: 0 });
    expect(reconcileUsage({ ledger: [{ ...below, uncertain: false }], pricing }).cost).toMatchObject({ ok: false, capped: 0 });
  });

  it('prices each row with priceOf when given (the snapshot of its time), and names what it cannot price', () => {
    const at = new Date(Date.UTC(2026, 0, 1));
    const then: RevisionPricing = { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 };
    const old = { ...row('o1', 'a', 'r1', 10, 10, { finishedAt: at }), costNanoUsd: priceUsage(then, { inputTokens: 10, outputTokens: 10 }) };
    const later = row('o2', 'a', 'r1', 10, 10, { finishedAt: new Date(at.getTime() + 1) });
    const priceOf = (r: LedgerUsageRow) => (r.finishedAt && r.finishedAt.getTime() <= at.getTime() ? then : r.generationId === 'o3' ? undefined : cheap);
    expect(reconcileUsage({ ledger: [old, later], pricing: new Map(), priceOf })).toMatchObject({ ok: true, differences: [] });
    // With the revision's current prices only, the old row would differ.
    expect(reconcileUsage({ ledger: [old, later], pricing }).cost.mismatches.count).toBe(1);
    const unpriced = row('o3', 'a', 'r1', 1, 1, { finishedAt: new Date(at.getTime() + 2) });
    expect(reconcileUsage({ ledger: [old, later, unpriced], pricing: new Map(), priceOf }).differences).toEqual(['ledger rows of revision r1, which has no prices in the configuration']);
  });

  it('finds generations missing on either side and differing counts against the stream', () => {
    const stream = ledger.slice(1).map(asStream);
    stream[0] = { ...stream[0], outputTokens: stream[0].outputTokens + 1 };
    stream.push({ generationId: 'g9', tenantId: 'a', modelRevision: 'r1', inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, costNanoUsd: 300 });
    const result = reconcileUsage({ ledger, stream, pricing });
    expect(result.ok).toBe(false);
    expect(result.stream).toMatchObject({
      ok: false,
      missingInLedger: { count: 1, ids: ['g9'] },
      missingInStream: { count: 1, ids: ['g1'] },
      differing: { count: 1, items: [{ generationId: 'g2' }] },
    });
    expect(result.differences).toHaveLength(3);
  });

  it('compares a row settled by reconciliation by its recorded counts against the stream, and its settled counts against the engines', () => {
    const recorded = { inputTokens: 5, outputTokens: 4, cachedInputTokens: 0, costNanoUsd: priceUsage(cheap, { inputTokens: 5, outputTokens: 4 }) };
    const settled = row('gu', 'a', 'r1', 5, 9, { recorded });
    const result = reconcileUsage({
      ledger: [settled],
      stream: [asStream(settled)],
      engines: [{ replicaId: 'r1/0', revisionId: 'r1', inputTokens: 5, outputTokens: 9 }],
      pricing,
    });
    expect(result.differences).toEqual([]);
  });

  it('reports an engine count that differs from the ledger, per revision, and ignores revisions without samples', () => {
    const result = reconcileUsage({ ledger, engines: [{ replicaId: 'r1/0', revisionId: 'r1', inputTokens: 12, outputTokens: 12 }], pricing });
    expect(result.engines).toHaveLength(1);
    expect(result.differences).toEqual(['revision r1: engines counted 12 input / 12 output tokens, the ledger 12 / 13']);
  });

  it('lists uncertain rows without calling them a difference', () => {
    const result = reconcileUsage({ ledger: [row('u1', 'a', 'r1', 5, 3, { uncertain: true })], pricing });
    expect(result.uncertain).toEqual({ count: 1, ids: ['u1'] });
    expect(result.ok).toBe(true);
  });

  it('is empty and agreeing for an empty window', () => {
    const result = reconcileUsage({ ledger: [], stream: [], engines: [], pricing });
    expect(result).toMatchObject({ ok: true, ledger: [], ledgerTotals: { records: 0, costNanoUsd: 0 }, engines: [] });
  });
});

describe('settleFromEngineCount', () => {
  it('takes the engine’s tokens and prices them with the revision’s prices', () => {
    expect(settleFromEngineCount(cheap, { cachedInputTokens: 0 }, { promptTokens: 5, completionTokens: 17 })).toEqual({
      inputTokens: 5,
      outputTokens: 17,
      cachedInputTokens: 0,
      costNanoUsd: 5 * 100 + 17 * 200,
    });
  });

  it('keeps the recorded cached tokens, capped at the prompt', () => {
    expect(settleFromEngineCount(cheap, { cachedInputTokens: 8 }, { promptTokens: 5, completionTokens: 0 })).toMatchObject({ cachedInputTokens: 5, costNanoUsd: 5 * 50 });
  });

  it('refuses a count that is not a non-negative integer', () => {
    expect(() => settleFromEngineCount(cheap, { cachedInputTokens: 0 }, { promptTokens: -1, completionTokens: 0 })).toThrow(RangeError);
  });
});
