import type { ApiKeyIdentity, ApiKeyStore } from '@weir/core';
import { createCachedApiKeyStore } from './cached-api-key-store';

/** A hand-written fake store counting its lookups; `answers` maps hash → identity. */
function fakeStore(answers: Record<string, ApiKeyIdentity | undefined>) {
  const calls: string[] = [];
  let failNext = false;
  let gate: Promise<void> | undefined;
  const store: ApiKeyStore = {
    async findByHash(hash) {
      calls.push(hash);
      if (gate) await gate;
      if (failNext) {
        failNext = false;
        throw new Error('db down');
      }
      return answers[hash];
    },
  };
  return {
    store,
    calls,
    answers,
    failOnce: () => (failNext = true),
    hold: () => {
      let release!: () => void;
      gate = new Promise((r) => (release = r));
      return () => {
        gate = undefined;
        release();
      };
    },
  };
}

function manualClock(start = 1000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

const alice: ApiKeyIdentity = { keyId: 'k1', prefix: 'abcd1234', tenantId: 'acme', appId: 'web' };

describe('createCachedApiKeyStore', () => {
  it('answers repeat lookups from memory until the TTL passes', async () => {
    const fake = fakeStore({ h1: alice });
    const clock = manualClock();
    const cache = createCachedApiKeyStore(fake.store, { ttlMs: 30_000 }, { clock });
    expect(await cache.findByHash('h1')).toEqual(alice);
    clock.advance(29_999);
    expect(await cache.findByHash('h1')).toEqual(alice);
    expect(fake.calls).toEqual(['h1']);
    clock.advance(1);
    fake.answers.h1 = undefined; // revoked in the database
    expect(await cache.findByHash('h1')).toBeUndefined();
    expect(fake.calls).toEqual(['h1', 'h1']);
  });

  it('remembers unknown hashes for the shorter negative TTL', async () => {
    const fake = fakeStore({});
    const clock = manualClock();
    const cache = createCachedApiKeyStore(fake.store, { negativeTtlMs: 2_000 }, { clock });
    expect(await cache.findByHash('nope')).toBeUndefined();
    clock.advance(1_999);
    expect(await cache.findByHash('nope')).toBeUndefined();
    expect(fake.calls).toHaveLength(1);
    clock.advance(1);
    fake.answers.nope = alice; // the key was created meanwhile
    expect(await cache.findByHash('nope')).toEqual(alice);
  });

  it('coalesces concurrent lookups of one hash into one store call', async () => {
    const fake = fakeStore({ h1: alice });
    const cache = createCachedApiKeyStore(fake.store);
    const release = fake.hold();
    const all = Promise.all([cache.findByHash('h1'), cache.findByHash('h1'), cache.findByHash('h1')]);
    release();
    expect(await all).toEqual([alice, alice, alice]);
    expect(fake.calls).toEqual(['h1']);
  });

  it('passes store errors through and does not cache them', async () => {
    const fake = fakeStore({ h1: alice });
    const cache = createCachedApiKeyStore(fake.store);
    fake.failOnce();
    await expect(cache.findByHash('h1')).rejects.toThrow('db down');
    expect(await cache.findByHash('h1')).toEqual(alice);
  });

  it('invalidate drops an entry and any answer still in flight', async () => {
    const fake = fakeStore({ h1: alice });
    const cache = createCachedApiKeyStore(fake.store);
    await cache.findByHash('h1');
    const release = fake.hold();
    cache.invalidate('h1');
    const stale = cache.findByHash('h1');
    cache.invalidate('h1'); // revocation arrives while the lookup runs
    fake.answers.h1 = undefined;
    release();
    await stale;
    expect(await cache.findByHash('h1')).toBeUndefined();
    cache.invalidate();
    expect(cache.size()).toBe(0);
  });

  it('invalidateKeyId drops every hash cached for that key id and leaves other keys cached', async () => {
    const bob: ApiKeyIdentity = { keyId: 'k2', prefix: 'efgh5678', tenantId: 'acme', appId: 'web' };
    const fake = fakeStore({ h1: alice, h2: bob });
    const cache = createCachedApiKeyStore(fake.store, { ttlMs: 30_000 }, { clock: manualClock() });
    await cache.findByHash('h1');
    await cache.findByHash('h2');
    fake.answers.h1 = undefined; // revoked in the database
    cache.invalidateKeyId('k1');
    expect(await cache.findByHash('h1')).toBeUndefined();
    expect(await cache.findByHash('h2')).toEqual(bob);
    expect(fake.calls).toEqual(['h1', 'h2', 'h1']);
  });

  it('bounds found and unknown entries separately, evicting the least recently used', async () => {
    const fake = fakeStore({ a: alice, b: { ...alice, keyId: 'k2' }, c: { ...alice, keyId: 'k3' } });
    const cache = createCachedApiKeyStore(fake.store, { maxEntries: 2 });
    await cache.findByHash('a');
    await cache.findByHash('b');
    await cache.findByHash('a'); // a is now most recent
    await cache.findByHash('c'); // evicts b
    for (let i = 0; i < 10; i++) await cache.findByHash(`junk${i}`);
    expect(cache.size()).toBe(4);
    fake.calls.length = 0;
    await cache.findByHash('a');
    await cache.findByHash('c');
    expect(fake.calls).toEqual([]);
    await cache.findByHash('b');
    expect(fake.calls).toEqual(['b']);
  });
});
