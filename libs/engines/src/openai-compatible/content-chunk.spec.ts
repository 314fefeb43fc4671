import { createContentChunkReader } from './content-chunk';

/** The adapter's reading of a plain content chunk (as `plainContentOf` in the adapter), over JSON text. */
function plainText(json: string): string | undefined {
  let obj: Record<string, unknown>;
  try {
    obj = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) return undefined;
  if ((obj.error ?? null) !== null || (obj.usage ?? null) !== null) return undefined;
  const choices = obj.choices as Record<string, unknown>[] | undefined;
  if (!Array.isArray(choices) || choices.length !== 1) return undefined;
  const c = choices[0];
  if (typeof c !== 'object' || c === null || (c.index ?? 0) !== 0 || (c.finish_reason ?? null) !== null) return undefined;
  const d = c.delta as Record<string, unknown> | undefined;
  if (typeof d !== 'object' || d === null || (d.tool_calls ?? null) !== null) return undefined;
  return typeof d.content === 'string' ? d.content : undefined;
}

const chunk = (content: string, extra = '') =>
  `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null}]${extra}}`;

/** A reader that learned from `chunk('Hello')`. */
function learned() {
  const r = createContentChunkReader();
  r.learn(chunk('Hello'), 'Hello', plainText);
  return r;
}

describe('createContentChunkReader', () => {
  it('reads nothing before it learned a template', () => {
    expect(createContentChunkReader().read(chunk('Hello'))).toBeUndefined();
  });

  it.each([
    ['plain text', 'tok '],
    ['the empty text', ''],
    ['escapes', 'a"b\\c\n\t/'],
    ['non-ASCII text', 'héllo 🌍 日本語'],
    ['long text', 'x'.repeat(200)],
    ['text that looks like JSON', '","model":"evil"}'],
  ])('reads %s from a chunk shaped like the learned one', (_name, text) => {
    expect(learned().read(chunk(text))).toBe(text);
  });

  it('reads an upstream’s own escaping of the text (\\u escapes), as a full parse does', () => {
    const json = chunk('Hello').replace('"Hello"', '"\\u00e9t\\u00e9"');
    expect(learned().read(json)).toBe('été');
  });

  it.each([
    ['a finish chunk', chunk('x').replace('"finish_reason":null', '"finish_reason":"stop"')],
    ['a usage chunk', chunk('x', ',"usage":{"prompt_tokens":1}')],
    ['another id', chunk('x').replace('chatcmpl-1', 'chatcmpl-2')],
    ['two strings where one was', chunk('Hello').replace('"Hello"', '"a","b"')],
    ['a number where the text was', chunk('Hello').replace('"Hello"', '12')],
    ['a raw control character', chunk('Hello').replace('"Hello"', '"a\u0001b"')],
    ['a bad escape', chunk('Hello').replace('"Hello"', '"a\\qb"')],
    ['an unterminated text', chunk('Hello').replace('"Hello"', '"a\\"')],
  ])('leaves %s to the full parse', (_name, json) => {
    expect(learned().read(json)).toBeUndefined();
  });

  it('learns nothing when the literal occurs twice, or is not where the content is', () => {
    const twice = createContentChunkReader();
    twice.learn(chunk('m').replace('"model":"m"', '"model":"m"'), 'm', plainText);
    expect(twice.read(chunk('x'))).toBeUndefined();
    // The content escaped differently by the upstream, the same string elsewhere: the slot
    // found would be the model's, and the probe says so.
    const elsewhere = createContentChunkReader();
    const json = chunk('é').replace('"model":"m"', '"model":"é"').replace('"content":"é"', '"content":"\\u00e9"');
    elsewhere.learn(json, 'é', plainText);
    expect(elsewhere.read(json.replace('"model":"é"', '"model":"x"'))).toBeUndefined();
  });

  it('never answers differently from a full parse, on random corruptions of learned chunks', () => {
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const alphabet = '{}[]",:0123456789 \\nulltrue-.eEu';
    let answered = 0;
    for (const base of [chunk('Hello'), chunk('a "quoted" \\ word'), chunk('x'.repeat(30))]) {
      const reader = createContentChunkReader();
      reader.learn(base, plainText(base) as string, plainText);
      for (let k = 0; k < 3_000; k++) {
        const at = rand(base.length);
        const op = rand(3);
        const ch = alphabet[rand(alphabet.length)];
        const json = op === 0 ? base.slice(0, at) + ch + base.slice(at + 1) : op === 1 ? base.slice(0, at) + base.slice(at + 1) : base.slice(0, at) + ch + base.slice(at);
        const fast = reader.read(json);
        if (fast !== undefined) {
          answered++;
          expect({ json, text: plainText(json) }).toEqual({ json, text: fast });
        }
      }
    }
    // Corruptions inside the text are still read (as a full parse reads them).
    expect(answered).toBeGreaterThan(100);
  });
});
