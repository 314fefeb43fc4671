import { checkJsonText, describeJsonProblem, type JsonGuardProblem } from './json-guard';

const limits = { maxDepth: 64 };

describe('checkJsonText', () => {
  const clean: [string, string][] = [
    ['a chat body', JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi "there" \\ {[' }], stream: true, stop: ['a', 'b'] })],
    ['the same key in sibling objects', '{"a":{"x":1},"b":{"x":2},"c":[{"x":1},{"x":1}]}'],
    ['the same key at two levels', '{"x":{"x":{"x":1}}}'],
    ['keys that differ only in length or one character', '{"ab":1,"abc":2,"abd":3,"a":4}'],
    ['escaped quotes and backslashes in values', '{"a":"\\\\","b":"\\"","c":"x\\\\\\"y"}'],
    ['64 levels exactly', '['.repeat(64) + ']'.repeat(64)],
    ['a scalar', '"just a string"'],
    ['an empty object', '{}'],
    ['many distinct keys (the Set path)', JSON.stringify(Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`k${i}`, i])))],
  ];
  it.each(clean)('passes %s', (_name, text) => {
    expect(checkJsonText(text, limits)).toBeUndefined();
  });

  const bad: [string, string, JsonGuardProblem][] = [
    ['a top-level duplicate', '{"model":"a","messages":[],"model":"b"}', { kind: 'duplicate_key', key: 'model', path: '$' }],
    ['a nested duplicate', '{"messages":[{"role":"user"},{"role":"user","content":"x","role":"system"}]}', { kind: 'duplicate_key', key: 'role', path: '$.messages[1]' }],
    ['a duplicate spelled with an escape', '{"model":"a","\\u006dodel":"b"}', { kind: 'duplicate_key', key: 'model', path: '$' }],
    ['a duplicate after another object closed', '{"a":{"b":1,"c":2},"d":3,"a":4}', { kind: 'duplicate_key', key: 'a', path: '$' }],
    ['a duplicate in a big object', `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')},"k7":0}`, { kind: 'duplicate_key', key: 'k7', path: '$' }],
    ['a duplicate inside an object under a key', '{"response_format":{"json_schema":{"name":"a","name":"b"}}}', { kind: 'duplicate_key', key: 'name', path: '$.response_format.json_schema' }],
    ['65 levels of arrays', '['.repeat(65) + ']'.repeat(65), { kind: 'too_deep', maxDepth: 64, path: `$${'[0]'.repeat(64)}` }],
    ['65 levels of objects', '{"a":'.repeat(65) + '1' + '}'.repeat(65), { kind: 'too_deep', maxDepth: 64, path: `$${'.a'.repeat(64)}` }],
  ];
  it.each(bad)('finds %s', (_name, text, problem) => {
    expect(checkJsonText(text, limits)).toEqual(problem);
  });

  it('stops a 100,000-deep body at the limit, without recursion', () => {
    const arrays = '['.repeat(100_000) + ']'.repeat(100_000);
    expect(checkJsonText(arrays, limits)).toMatchObject({ kind: 'too_deep', maxDepth: 64 });
    const objects = '{"a":'.repeat(100_000) + '1' + '}'.repeat(100_000);
    expect(checkJsonText(objects, limits)).toMatchObject({ kind: 'too_deep', maxDepth: 64 });
  });

  it('reports depth even after a duplicate (a deep body must not reach the parser)', () => {
    const text = `{"a":1,"a":2,"b":${'['.repeat(70)}${']'.repeat(70)}}`;
    expect(checkJsonText(text, limits)).toMatchObject({ kind: 'too_deep' });
  });

  it('honours a configured depth', () => {
    expect(checkJsonText('[[[1]]]', { maxDepth: 2 })).toMatchObject({ kind: 'too_deep', maxDepth: 2, path: '$[0][0]' });
    expect(checkJsonText('['.repeat(200) + ']'.repeat(200), { maxDepth: 300 })).toBeUndefined();
  });

  it('never throws on malformed text and leaves it to JSON.parse', () => {
    for (const text of ['{"a', '{"a":"b', '}}}', '{"a\\', '[1,2', '{"a":1,"a"', '"\\']) expect(() => checkJsonText(text, limits)).not.toThrow();
  });

  it('takes linear time on an object of many keys (no quadratic key comparison)', () => {
    // 100,000 keys with the same hash-prefix shape: pairwise comparison would be 5e9 steps.
    const text = `{${Array.from({ length: 100_000 }, (_, i) => `"${i}":0`).join(',')}}`;
    const t0 = performance.now();
    expect(checkJsonText(text, limits)).toBeUndefined();
    // A functional bound with a wide margin (a quadratic scan takes minutes), not a speed assertion.
    expect(performance.now() - t0).toBeLessThan(10_000);
  });
});

describe('describeJsonProblem', () => {
  it('names the limit', () => {
    expect(describeJsonProblem({ kind: 'too_deep', maxDepth: 64, path: '$[0]' }).message).toBe('The request body nests deeper than 64 levels of arrays and objects (at $[0]); send a flatter body.');
  });
  it('names the key and where it is', () => {
    expect(describeJsonProblem({ kind: 'duplicate_key', key: 'model', path: '$' })).toEqual({ message: 'Duplicate key "model" in the request body; send each key once.', param: 'model' });
    expect(describeJsonProblem({ kind: 'duplicate_key', key: 'role', path: '$.messages[1]' })).toEqual({
      message: 'Duplicate key "role" in `messages[1]` of the request body; send each key once.',
      param: 'messages[1].role',
    });
  });
});
