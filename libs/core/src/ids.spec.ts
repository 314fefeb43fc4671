import { newId } from './ids';

describe('newId', () => {
  it('is the prefix, an underscore and 22 base64url characters (128 bits)', () => {
    expect(newId('gen')).toMatch(/^gen_[A-Za-z0-9_-]{22}$/);
  });

  it('never repeats, across many refills of its random pool', () => {
    const ids = Array.from({ length: 20_000 }, () => newId('req'));
    expect(new Set(ids).size).toBe(ids.length);
    // Every character position varies (no byte of the pool handed out twice in the same place).
    const firstChars = new Set(ids.map((id) => id[4]));
    expect(firstChars.size).toBeGreaterThan(32);
  });
});
