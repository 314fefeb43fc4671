import { checkSuppliedApiKey, digestsEqual, hashApiKey, mintApiKey, parseApiKey } from './api-keys';

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
    ['', false],
    ['sk-abc', false],
    ['wk_ABCDEFGH_aaaaaaaaaaaaaaaaaaaaaaaa', false],
    ['wk_abcd1234_short', false],
    ['wk_abcd1234_aaaaaaaaaaaaaaaaaaaaaa', true],
  ])('parses %j as well-formed=%s', (input, ok) => {
    expect(parseApiKey(input) !== undefined).toBe(ok);
    expect(checkSuppliedApiKey(input) === undefined).toBe(ok);
  });

  it('compares digests in constant time and by value', () => {
    const h = hashApiKey('x');
    expect(digestsEqual(h, hashApiKey('x'))).toBe(true);
    expect(digestsEqual(h, hashApiKey('y'))).toBe(false);
    expect(digestsEqual(h, 'abcd')).toBe(false);
  });
});
