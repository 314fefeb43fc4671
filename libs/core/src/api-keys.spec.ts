import { checkSuppliedApiKey, digestsEqual, displayPrefixOf, hashApiKey, mintApiKey, parseApiKey } from './api-keys';

describe('api keys', () => {
  it('mints wk_<prefix>_<secret> keys with at least 128 bits of secret', () => {
    const key = mintApiKey();
    expect(key.plaintext).toMatch(/^wk_[a-z0-9]{8}_[A-Za-z0-9_-]{43}$/);
    expect(parseApiKey(key.plaintext)).toEqual({ prefix: key.prefix });
    expect(Buffer.from(key.plaintext.split('_').slice(2).join('_'), 'base64url').length).toBeGreaterThanOrEqual(16);
  });

  it('stores SHA-256 of the whole key and never the key', () => {
    const key = mintApiKey();
    expect(key.sha256).toBe(hashApiKey(key.plaintext));
    expect(key.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(key.sha256).not.toContain(key.plaintext);
  });

  it('mints distinct keys', () => {
    const seen = new Set(Array.from({ length: 200 }, () => mintApiKey().plaintext));
    expect(seen.size).toBe(200);
  });

  it.each([
    ['', false, false],
    ['sk-abc', false, false],
    ['sk-smoke-1234', false, true],
    ['wk_ABCDEFGH_aaaaaaaaaaaaaaaaaaaaaaaa', false, true],
    ['wk_abcd1234_short', false, true],
    ['wk_abcd1234_aaaaaaaaaaaaaaaaaaaaaa', true, true],
    ['sk-smoke-1234567890', false, true],
    ['has space inside it ok?', false, false],
  ])('parses %j as a Weir key=%s, acceptable as a supplied key=%s', (input, weir, supplied) => {
    expect(parseApiKey(input) !== undefined).toBe(weir);
    expect(checkSuppliedApiKey(input) === undefined).toBe(supplied);
  });

  it('derives a display prefix for keys of another format from their hash', () => {
    const key = mintApiKey();
    expect(displayPrefixOf(key.plaintext)).toBe(key.prefix);
    expect(displayPrefixOf('sk-smoke-1234567890')).toBe(hashApiKey('sk-smoke-1234567890').slice(0, 8));
  });

  it('compares digests in constant time and by value', () => {
    const h = hashApiKey('x');
    expect(digestsEqual(h, hashApiKey('x'))).toBe(true);
    expect(digestsEqual(h, hashApiKey('y'))).toBe(false);
    expect(digestsEqual(h, 'abcd')).toBe(false);
  });
});
