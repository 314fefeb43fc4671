import type { RevisionPricing } from '@weir/core';
import { createPriceBook, priceOf, pricesOfStoredRevisions } from './price-book';

const p = (input: number, output = 1, cached = input, cacheWrite = input, reasoning = output): RevisionPricing => ({
  inputPerMTok: input,
  outputPerMTok: output,
  cachedInputPerMTok: cached,
  cacheWriteInputPerMTok: cacheWrite,
  reasoningPerMTok: reasoning,
});
const at = (min: number) => new Date(Date.UTC(2026, 0, 1, 0, min));

describe('price book', () => {
  // v1 (00:10) lists a@1 at 0.1 and b@1; v2 (00:20) drops a@1; v3 (00:30) lists a@1 again, at 0.5
  // (an id deleted and created anew); v4 (00:40) changes only b@1's placement (same prices).
  const book = createPriceBook([
    { version: 3, issuedAt: at(30), pricing: new Map([['a@1', p(0.5)], ['b@1', p(2)]]) },
    { version: 1, issuedAt: at(10), pricing: new Map([['a@1', p(0.1)], ['b@1', p(2)]]) },
    { version: 2, issuedAt: at(20), pricing: new Map([['b@1', p(2)]]) },
    { version: 4, issuedAt: at(40), pricing: new Map([['b@1', p(2)]]) },
  ]);

  it('prices a row with the snapshot that was current when it finished, also for a revision later removed', () => {
    expect(book.priceAt('a@1', at(15))).toEqual(p(0.1));
    // v2 does not list it: the latest snapshot that did, before the row, is v1.
    expect(book.priceAt('a@1', at(25))).toEqual(p(0.1));
    expect(book.priceAt('a@1', at(35))).toEqual(p(0.5));
    expect(book.priceAt('a@1', at(30))).toEqual(p(0.5));
  });

  it('prices a row older than every snapshot with the earliest, and without a time with the latest', () => {
    expect(book.priceAt('a@1', at(1))).toEqual(p(0.1));
    expect(book.priceAt('a@1')).toEqual(p(0.5));
    expect(book.priceAt('nope@1', at(15))).toBeUndefined();
    expect(book.revisions()).toEqual(['a@1', 'b@1']);
    expect(book.snapshots).toBe(4);
  });

  it('reads a map as prices for every time', () => {
    const map = new Map([['a@1', p(0.3)]]);
    expect(priceOf(map, 'a@1', at(5))).toEqual(p(0.3));
    expect(priceOf(book, 'a@1', at(15))).toEqual(p(0.1));
  });

  it('reads stored revisions in the file shape, cache reads and writes defaulting to input and reasoning to output, skipping what is not a priced revision', () => {
    expect(
      pricesOfStoredRevisions([
        { id: 'a@1', model: 'm', pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 } },
        { id: 'b@1', pricing: { input_per_mtok: 1, output_per_mtok: 2, cached_input_per_mtok: 0.5 } },
        { id: 'd@1', pricing: { input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3, cache_write_input_per_mtok: 3.75, reasoning_per_mtok: 20 } },
        { id: 'c@1', pricing: { input_per_mtok: -1, output_per_mtok: 2 } },
        { id: 'e@1', pricing: { input_per_mtok: 1, output_per_mtok: 2, reasoning_per_mtok: -1 } },
        { pricing: { input_per_mtok: 1, output_per_mtok: 2 } },
        'nonsense',
      ]),
    ).toEqual({
      pricing: new Map([
        ['a@1', p(0.1, 0.2)],
        ['b@1', p(1, 2, 0.5)],
        ['d@1', p(3, 15, 0.3, 3.75, 20)],
      ]),
      skipped: 4,
    });
    expect(pricesOfStoredRevisions(null)).toEqual({ pricing: new Map(), skipped: 0 });
  });
});
