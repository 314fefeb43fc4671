import type { SettlementBatch, SettlementItem } from '@weir/core';
import { buildSettlementEntry, createInMemorySettlementApplier } from '@weir/testing';
import { type RejectedSettlement, applyIsolating, isDataError } from './settlement-isolation';

const dataError = (code = '22003') => Object.assign(new Error('integer out of range'), { code });
const settle = (i: number, extra = {}): SettlementItem => ({ kind: 'settle', entry: buildSettlementEntry(i, {}, 'iso', extra) });

describe('applyIsolating', () => {
  it.each([
    ['22003', true],
    ['23505', true],
    ['54000', true],
    ['08006', false],
    ['57P01', false],
    [undefined, false],
  ])('treats SQLSTATE %s as a data error: %s', (code, expected) => {
    expect(isDataError(Object.assign(new Error('x'), { code }))).toBe(expected);
  });

  it('applies the others one at a time, degrades an item that fails, sets aside one that fails degraded, and records the position last', async () => {
    const inner = createInMemorySettlementApplier();
    const poisonResult = settle(2, { idempotency: { tenantId: 't', key: 'k', outcome: { kind: 'result', result: { generationId: 'gen_iso_2' } as never }, retainUntilMs: 1 } });
    const poisonRow = settle(3);
    const applier = {
      position: inner.position,
      apply: async (b: SettlementBatch) => {
        if (b.items.some((it) => it.kind === 'settle' && it.entry.usage.generationId === 'gen_iso_3')) throw dataError();
        if (b.items.some((it) => it.kind === 'settle' && it.entry.idempotency?.outcome.kind === 'result')) throw dataError('22P05');
        return inner.apply(b);
      },
    };
    const rejected: RejectedSettlement[] = [];
    const result = await applyIsolating(applier, { journal: 'j', items: [settle(1), poisonResult, poisonRow, settle(4)], position: { segment: 1, offset: 9 } }, (r) => rejected.push(r));
    expect([...inner.rows.keys()]).toEqual(['gen_iso_1', 'gen_iso_2', 'gen_iso_4']);
    expect(inner.keys.get('t/k')?.outcome).toMatchObject({ kind: 'interrupted', generationId: 'gen_iso_2', message: expect.stringContaining('could not be stored') });
    expect(rejected.map((r) => r.item)).toEqual([poisonRow]);
    expect(result).toMatchObject({ inserted: 3, idempotencyWritten: 1 });
    expect(inner.batches[inner.batches.length - 1]).toEqual({ journal: 'j', items: [], position: { segment: 1, offset: 9 } });
  });

  it('throws an outage error as it is (the caller retries the batch), whole or midway', async () => {
    const inner = createInMemorySettlementApplier();
    const down = Object.assign(new Error('connection refused'), { code: 'ECONNREFUSED' });
    await expect(applyIsolating({ position: inner.position, apply: async () => Promise.reject(down) }, { journal: 'j', items: [settle(1)] }, () => undefined)).rejects.toBe(down);
    let calls = 0;
    const flaky = { position: inner.position, apply: async (b: SettlementBatch) => (++calls === 1 ? Promise.reject(dataError()) : calls === 3 ? Promise.reject(down) : inner.apply(b)) };
    await expect(applyIsolating(flaky, { journal: 'j', items: [settle(1), settle(2)] }, () => undefined)).rejects.toBe(down);
  });
});
