/**
 * The redactor: replacement forms, overlapping spans, the size cap (with a span across the cut),
 * fail-closed on a failing or slow recognizer, and profile compilation with RE2 validation.
 */
import { compileProfiles, createRedactor, type CompiledProfile, type Recognizer } from './index';

function profile(name = 'default'): CompiledProfile {
  const r = compileProfiles();
  if (!r.ok) throw new Error(r.errors.join('; '));
  return r.profiles.get(name) as CompiledProfile;
}

const CARD = '4111 1111 1111 1111';
const EMAIL = 'jane.doe@example.com';
const KEY = 'sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12';

describe('createRedactor', () => {
  it('replaces every kind with its tag and counts by type', () => {
    const r = createRedactor(profile()).redact(`mail ${EMAIL}, card ${CARD}, key ${KEY}, ssn 123-45-6789, from 10.1.2.3`);
    expect(r).toEqual({
      ok: true,
      text: 'mail [REDACTED:EMAIL], card [REDACTED:CARD], key [REDACTED:SECRET], ssn [REDACTED:SSN], from [REDACTED:IP]',
      counts: { email: 1, card: 1, secret: 1, ssn: 1, ipv4: 1 },
      truncatedChars: 0,
    });
  });

  it('hash mode: the same value gets the same keyed hash, another value another one', () => {
    const red = createRedactor(profile('strict'), { hashKey: 'k'.repeat(32) });
    const a = red.redact(`${EMAIL} ${EMAIL} other@example.com`);
    if (!a.ok) throw new Error('failed');
    const hashes = [...a.text.matchAll(/\[REDACTED:EMAIL:([0-9a-f]{12})\]/g)].map((m) => m[1]);
    expect(hashes).toHaveLength(3);
    expect(hashes[0]).toBe(hashes[1]);
    expect(hashes[2]).not.toBe(hashes[0]);
    expect(a.text).not.toContain('example.com');
    // Another key, another hash: the hash is not a plain digest of the value.
    const b = createRedactor(profile('strict'), { hashKey: 'x'.repeat(32) }).redact(EMAIL);
    expect(b.ok && b.text).not.toContain(hashes[0]);
  });

  it('replaces the union of overlapping spans (a key inside a high-entropy run)', () => {
    const r = createRedactor(profile()).redact(`see abc/${KEY} now`);
    // The entropy run starts at `abc/`, the key at `sk-`: one replacement covers both.
    expect(r).toMatchObject({ ok: true, text: 'see [REDACTED:SECRET] now', counts: { entropy: 1 } });
  });

  it('cuts at maxChars with a marker, and replaces a span across the cut whole', () => {
    const red = createRedactor(profile(), { maxChars: 300 });
    const text = `${'a '.repeat(145)}xx ${CARD} tail ${'b'.repeat(1000)}`;
    const r = red.redact(text);
    if (!r.ok) throw new Error('failed');
    expect(r.text.startsWith('a a ')).toBe(true);
    expect(r.text).toContain('[REDACTED:CARD]');
    expect(r.text).not.toMatch(/4111|1111/);
    expect(r.text).toMatch(/\[TRUNCATED:\d+ chars\]$/);
    expect(r.text).not.toContain('tail');
    expect(r.truncatedChars).toBe(text.length - (text.indexOf(CARD) + CARD.length));
  });

  it('fails closed when a recognizer throws: no text comes back', () => {
    const broken: Recognizer = {
      type: 'broken',
      tag: 'X',
      find() {
        throw new Error('recognizer fault');
      },
    };
    const r = createRedactor({ name: 'p', recognizers: [profile().recognizers[0], broken] }).redact(`mail ${EMAIL}`);
    expect(r).toMatchObject({ ok: false, reason: 'error' });
    expect(JSON.stringify(r)).not.toContain(EMAIL);
  });

  it('fails closed when over its time budget (a fake clock)', () => {
    let t = 0;
    const slow: Recognizer = {
      type: 'slow',
      tag: 'S',
      find() {
        t += 80;
      },
    };
    const r = createRedactor({ name: 'p', recognizers: [slow] }, { budgetMs: 50, now: () => t }).redact(`mail ${EMAIL}`);
    expect(r).toEqual({ ok: false, reason: 'timeout' });
    t = 0;
    const fine = createRedactor({ name: 'p', recognizers: [slow] }, { budgetMs: 100, now: () => t }).redact('x');
    expect(fine.ok).toBe(true);
  });
});

describe('compileProfiles', () => {
  it('compiles custom RE2 patterns and runs them after the built-ins', () => {
    const r = compileProfiles([{ name: 'hr', recognizers: ['email'], customPatterns: [{ name: 'employee-id', pattern: 'EMP-[0-9]{6}' }] }]);
    if (!r.ok) throw new Error(r.errors.join('; '));
    const out = createRedactor(r.profiles.get('hr') as CompiledProfile).redact(`EMP-123456 wrote ${EMAIL} from 10.0.0.1`);
    expect(out).toMatchObject({ ok: true, text: '[REDACTED:EMPLOYEE_ID] wrote [REDACTED:EMAIL] from 10.0.0.1', counts: { 'employee-id': 1, email: 1 } });
  });

  it.each([
    [{ name: 'p', recognizers: ['email'], customPatterns: [{ name: 'x', pattern: '(a)\\1' }] }, 'p.custom_patterns[0].pattern: not a valid RE2 pattern'],
    [{ name: 'p', recognizers: ['email'], customPatterns: [{ name: 'x', pattern: '(?=a)b' }] }, 'p.custom_patterns[0].pattern: not a valid RE2 pattern'],
    [{ name: 'p', recognizers: ['email'], customPatterns: [{ name: 'x', pattern: 'a*' }] }, 'p.custom_patterns[0].pattern: pattern matches the empty string'],
    [{ name: 'p', recognizers: ['email'], customPatterns: [{ name: '1x', pattern: 'a' }] }, "p.custom_patterns[0].name: name '1x' must be"],
    [{ name: 'p', recognizers: ['email', 'passport'] }, "p.recognizers[1]: unknown recognizer 'passport'"],
    [{ name: 'default', recognizers: ['email'] }, "default: 'default' is a built-in profile"],
    [{ name: 'p', recognizers: [] }, 'p.recognizers: a profile needs at least one recognizer'],
  ])('refuses %j with a message that says what to fix', (spec, message) => {
    const r = compileProfiles([spec as never]);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.errors.join('\n')).toContain(message);
  });
});

describe('redactChunked', () => {
  const items = [CARD, EMAIL, KEY, '+44 20 7946 0958', 'DE89 3704 0044 0532 0130 00', '123-45-6789', '10.1.2.3'];
  // ~40 KiB with values at every offset modulo the chunk, so many straddle a chunk boundary.
  const text = Array.from({ length: 700 }, (_, i) => `${'x'.repeat(i % 37)} ${items[i % items.length]} end.`).join(' ');

  it('gives what one call gives, over chunks, and lets the event loop run between them', async () => {
    // A generous time budget: this checks chunking, not speed (a loaded machine can pass 250 ms on 40 KiB).
    const red = createRedactor(profile(), { maxChars: 1 << 20, budgetMs: 30_000 });
    const whole = red.redact(text);
    let turns = 0;
    const tick = () => {
      turns++;
      if (turns < 1000) setImmediate(tick);
    };
    setImmediate(tick);
    const chunked = await red.redactChunked(text, 1024);
    const turnsDuring = turns;
    turns = 1000;
    expect(chunked).toEqual(whole);
    expect(whole.ok && whole.text).not.toMatch(/4111|jane\.doe|sk-proj|7946|3704|6789|10\.1\.2\.3/);
    // ~40 chunks: other work ran between them (a single synchronous pass would leave 0 turns).
    expect(turnsDuring).toBeGreaterThan(10);
  });

  it('cuts at maxChars like redact, and fails closed on a failing or slow chunk', async () => {
    const red = createRedactor(profile(), { maxChars: 5000 });
    expect(await red.redactChunked(text, 1024)).toEqual(red.redact(text));
    const broken: Recognizer = {
      type: 'broken',
      tag: 'X',
      find(t) {
        if (t.includes('end.')) throw new Error('fault');
      },
    };
    expect(await createRedactor({ name: 'p', recognizers: [broken] }, { maxChars: 1 << 20 }).redactChunked(text, 1024)).toMatchObject({ ok: false, reason: 'error' });
    let t = 0;
    const slow: Recognizer = { type: 'slow', tag: 'S', find: () => void (t += 300) };
    expect(await createRedactor({ name: 'p', recognizers: [slow] }, { now: () => t }).redactChunked(text, 1024)).toEqual({ ok: false, reason: 'timeout' });
  });
});
