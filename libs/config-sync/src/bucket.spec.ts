import { CONFIG_BUCKET_KEYS, configBucketName, createMemoryConfigBucket } from './bucket';

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

describe('memory config bucket', () => {
  it('stores, lists, deletes and numbers revisions across keys', async () => {
    const b = createMemoryConfigBucket();
    expect(await b.put('snapshot', bytes('a'))).toBe(1);
    expect(await b.put(CONFIG_BUCKET_KEYS.revocation(1), bytes('r1'))).toBe(2);
    expect(await b.put('snapshot', bytes('b'))).toBe(3);
    expect(text(await b.get('snapshot'))).toBe('b');
    expect(await b.keys()).toEqual(['revocations.1', 'snapshot']);
    expect(await b.keys(CONFIG_BUCKET_KEYS.revocationPrefix)).toEqual(['revocations.1']);
    await b.delete('revocations.1');
    expect(await b.get('revocations.1')).toBeUndefined();
    expect(await b.keys()).toEqual(['snapshot']);
  });

  it('copies values so callers cannot change stored bytes', async () => {
    const b = createMemoryConfigBucket();
    const v = bytes('abc');
    await b.put('k', v);
    v[0] = 0x7a;
    const got = (await b.get('k'))!;
    got[1] = 0x7a;
    expect(text(await b.get('k'))).toBe('abc');
  });

  it('watch delivers current values in revision order, then changes and deletes, until stopped', async () => {
    const b = createMemoryConfigBucket();
    await b.put('heartbeat', bytes('h1'));
    await b.put('snapshot', bytes('s1'));
    await b.put('heartbeat', bytes('h2'));
    const seen: Array<[string, string | undefined, number]> = [];
    const w = await b.watch((k, v, r) => seen.push([k, text(v), r]));
    expect(seen).toEqual([
      ['snapshot', 's1', 2],
      ['heartbeat', 'h2', 3],
    ]);
    await b.put('snapshot', bytes('s2'));
    await b.delete('heartbeat');
    await Promise.resolve();
    expect(seen.slice(2)).toEqual([
      ['snapshot', 's2', 4],
      ['heartbeat', undefined, 5],
    ]);
    w.stop();
    await b.put('snapshot', bytes('s3'));
    await Promise.resolve();
    expect(seen).toHaveLength(4);
  });

  it('close stops watches and refuses writes', async () => {
    const b = createMemoryConfigBucket();
    const seen: string[] = [];
    await b.watch((k) => seen.push(k));
    await b.close();
    await expect(b.put('snapshot', bytes('x'))).rejects.toThrow(/closed/);
    expect(seen).toEqual([]);
  });

  it('names the bucket after the namespace and refuses a malformed one', () => {
    expect(configBucketName()).toBe('weir_config');
    expect(configBucketName('weir-test-1')).toBe('weir-test-1_config');
    expect(() => configBucketName('Weir.x')).toThrow(/WEIR_NATS_NAMESPACE/);
  });
});
