/**
 * Scanning a normalised copy: look-alike characters (full-width digits, Unicode spaces,
 * zero-width characters) no longer hide PII, and the replaced span is the right one of the
 * original text. The strings are those an attack run found reaching the content log raw.
 */
import { compileProfiles, createRedactor, type CompiledProfile } from './index';
import { normalizeForScan, originalSpan } from './normalize';

function profile(): CompiledProfile {
  const r = compileProfiles();
  if (!r.ok) throw new Error(r.errors.join('; '));
  return r.profiles.get('default') as CompiledProfile;
}

describe('normalizeForScan', () => {
  it('leaves ASCII text as is, without maps', () => {
    expect(normalizeForScan('plain 4111 text')).toEqual({ text: 'plain 4111 text' });
  });

  it('maps full-width digits, Unicode spaces and drops zero-width characters, with offsets back', () => {
    const original = 'a\u00a0４１\u200bb\u3000c';
    const scan = normalizeForScan(original);
    expect(scan.text).toBe('a 41b c');
    // '41' in the scanned text covers the full-width digits; the zero-width space after them stays outside.
    expect(originalSpan(scan, 2, 4)).toEqual([2, 4]);
    // '41b' spans the zero-width space in the original.
    expect(original.slice(...originalSpan(scan, 2, 5))).toBe('４１\u200bb');
  });

  it('maps an astral code point (mathematical bold digit) to one digit over two code units', () => {
    const scan = normalizeForScan('x\u{1D7CF}y');
    expect(scan.text).toBe('x1y');
    expect(originalSpan(scan, 1, 2)).toEqual([1, 3]);
  });
});

describe('redaction of the variants that leaked', () => {
  const red = createRedactor(profile());
  const cases: [name: string, value: string, tag: string][] = [
    ['card with dots', '4111.1111.1111.1111', 'CARD'],
    ['card with tabs', '4111\t1111\t1111\t1111', 'CARD'],
    ['card with newlines', '4111\n1111\n1111\n1111', 'CARD'],
    ['card with NBSP', '4111\u00a01111\u00a01111\u00a01111', 'CARD'],
    ['card with double spaces', '4111  1111  1111  1111', 'CARD'],
    ['card in full-width digits', '４１１１ １１１１ １１１１ １１１１', 'CARD'],
    ['card with an ideographic space and a zero-width space', '4111\u30001111\u3000\u200b1111 1\u200b111', 'CARD'],
    ['card as 6-6-4', '360000 000000 0008', 'CARD'],
    ['SSN with dots', '123.45.6789', 'SSN'],
    ['IBAN with hyphens', 'DE89-3704-0044-0532-0130-00', 'IBAN'],
    ['internationalised e-mail', 'jöhn@exämple.de', 'EMAIL'],
    ['e-mail with zero-width spaces', 'john\u200b.doe@exa\u200bmple.com', 'EMAIL'],
    ['e-mail with a quoted local part', '"john doe"@example.com', 'EMAIL'],
  ];
  it.each(cases)('%s', (_name, value, tag) => {
    const r = red.redact(`case value: ${value} end`);
    expect(r).toMatchObject({ ok: true, text: `case value: [REDACTED:${tag}] end` });
  });

  it('a card glued between letters and an IBAN glued to a word: the digits and the IBAN, not the letters', () => {
    expect(red.redact('x4111111111111111x acctDE89370400440532013000')).toMatchObject({ ok: true, text: 'x[REDACTED:CARD]x acct[REDACTED:IBAN]' });
  });

  it('the text around a replaced span keeps its original characters', () => {
    const r = red.redact('Grüße\u00a0an jöhn@exämple.de\u200b — ﬁn');
    expect(r).toMatchObject({ ok: true, text: 'Grüße\u00a0an [REDACTED:EMAIL]\u200b — ﬁn' });
  });

  it('keeps the tricky negatives in full-width and Unicode-spaced forms', () => {
    const text = 'order １２３４５６７８１２３４５６７０, date ２０２４.０１.１５, version 1.2.3.4567, isbn 978-0-306-40615-7, luhn-invalid 4111\u00a01111\u00a01111\u00a01112';
    expect(red.redact(text)).toMatchObject({ ok: true, text, counts: {} });
  });

  it('hash mode hashes the original characters of the span', () => {
    const strict = compileProfiles();
    if (!strict.ok) throw new Error('compile');
    const r = createRedactor(strict.profiles.get('strict') as CompiledProfile, { hashKey: 'k'.repeat(32) }).redact('a ４１１１ １１１１ １１１１ １１１１ b');
    expect(r.ok && r.text).toMatch(/^a \[REDACTED:CARD:[0-9a-f]{12}\] b$/);
  });
});
