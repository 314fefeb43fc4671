/**
 * Every built-in recognizer, on true positives and on the tricky negatives that must not be
 * flagged (Luhn-invalid cards, order numbers, dates, times, version strings, UUIDs, words).
 */
import {
  cardRecognizer,
  createEntropyRecognizer,
  emailRecognizer,
  ibanChecksumValid,
  ibanRecognizer,
  ipv4Recognizer,
  ipv6Recognizer,
  luhnValid,
  phoneRecognizer,
  type Recognizer,
  secretRecognizer,
  shannonEntropy,
  ssnRecognizer,
} from './index';

/** The substrings `r` flags in `text`. */
function found(r: Recognizer, text: string): string[] {
  const out: string[] = [];
  r.find(text, (s, e) => out.push(text.slice(s, e)));
  return out;
}

const cases: [string, Recognizer, [text: string, expected: string[]][]][] = [
  [
    'email',
    emailRecognizer,
    [
      ['write to jane.doe+news@example.co.uk today', ['jane.doe+news@example.co.uk']],
      ['<bob@corp.example.com>, alice@x.io.', ['bob@corp.example.com', 'alice@x.io']],
      ["o'brien@mail.ie", ["o'brien@mail.ie"]],
      ['user@localhost and a@1.2 and @handle and foo@ and .@x.com', []],
      ['twitter @weir_ai says hi', []],
      ['intl jöhn@exämple.de and почта@пример.рф and x@xn--e1afmkfd.xn--p1ai', ['jöhn@exämple.de', 'почта@пример.рф', 'x@xn--e1afmkfd.xn--p1ai']],
      ['quoted "john doe"@example.com, not "open@x.com', ['"john doe"@example.com', 'open@x.com']],
      ['empty quotes ""@example.com and "a\nb"@example.com', []],
    ],
  ],
  [
    'phone',
    phoneRecognizer,
    [
      ['call +1 202-555-0143 now', ['+1 202-555-0143']],
      ['uk +44 20 7946 0958.', ['+44 20 7946 0958']],
      ['fr: +33 1 23 45 67 89', ['+33 1 23 45 67 89']],
      ['de +4915123456789', ['+4915123456789']],
      ['(202) 555-0143 or 202.555.0143 or 1 202 555 0143', ['(202) 555-0143', '202.555.0143', '1 202 555 0143']],
      ['london 020 7946 0958, paris 01 23 45 67 89', ['020 7946 0958', '01 23 45 67 89']],
      ['order 1234567890 shipped on 2024-01-15 at 10:30:00', []],
      ['dates 15.01.2024 and 01/02/2024, ssn 123-45-6789, ip 192.168.100.200', []],
      ['card 4111 1111 1111 1111 and isbn 978-0-306-40615-7 and total 12,345,678', []],
      ['version 1.2.3.4567 and +12', []],
    ],
  ],
  [
    'card',
    cardRecognizer,
    [
      ['visa 4111 1111 1111 1111 ok', ['4111 1111 1111 1111']],
      ['mc 5555-5555-5555-4444; amex 3782 822463 10005', ['5555-5555-5555-4444', '3782 822463 10005']],
      ['plain 4242424242424242.', ['4242424242424242']],
      ['luhn-invalid 4111 1111 1111 1112 and 4242424242424241', []],
      ['order 1234567812345670 and 9999999999999995 (Luhn-valid, no issuer)', []],
      ['mixed separators 4111 1111-1111 1111 and 4111-1111 1111-1111.', ['4111 1111-1111 1111', '4111-1111 1111-1111']],
      ['mixed, amex 3782-822463 10005 and tabs 5555\t5555-5555\t4444', ['3782-822463 10005', '5555\t5555-5555\t4444']],
      ['mixed but luhn-invalid 4111 1111-1111 1112, odd groups 4111-11 111111 1111', []],
      ['dots never mix: 4111.1111-1111 1111 and 4111 1111.1111.1111', []],
      ['too long 41111111111111111111111', []],
      ['odd groups 41 1111 1111 1111 11', []],
      ['dots 4111.1111.1111.1111, tabs 4111\t1111\t1111\t1111', ['4111.1111.1111.1111', '4111\t1111\t1111\t1111']],
      ['lines 4111\n1111\n1111\n1111 and double 4111  1111  1111  1111', ['4111\n1111\n1111\n1111', '4111  1111  1111  1111']],
      ['diners 3056 930902 5904 and 6-6-4 360000 000000 0008', ['3056 930902 5904', '360000 000000 0008']],
      ['glued x4111111111111111x and acct4242424242424242.', ['4111111111111111', '4242424242424242']],
      ['dotted dates and versions 2024.01.15, 4.1.1111.1111, 4111.1111.1111.1111.2', []],
      ['too many blanks 4111    1111    1111    1111, luhn-invalid 4111.1111.1111.1112', []],
    ],
  ],
  [
    'iban',
    ibanRecognizer,
    [
      ['pay DE89 3704 0044 0532 0130 00 please', ['DE89 3704 0044 0532 0130 00']],
      ['GB82WEST12345698765432 and gb82 west 1234 5698 7654 32', ['GB82WEST12345698765432', 'gb82 west 1234 5698 7654 32']],
      ['GB82 WEST 1234 5698 7654 32 AND MORE', ['GB82 WEST 1234 5698 7654 32']],
      ['bad check DE89 3704 0044 0532 0130 01', []],
      ['unknown country ZZ12 3456 7890 1234 56, or DE89370400440532013000X', []],
      ['hyphens DE89-3704-0044-0532-0130-00 end', ['DE89-3704-0044-0532-0130-00']],
      ['glued acctDE89370400440532013000 and iban:GB82WEST12345698765432', ['DE89370400440532013000', 'GB82WEST12345698765432']],
      ['mixed DE89-3704 0044-0532-0130-00, after digit 1DE89370400440532013000', []],
    ],
  ],
  [
    'ssn',
    ssnRecognizer,
    [
      ['ssn 123-45-6789 and 078 05 1121', ['123-45-6789', '078 05 1121']],
      ['invalid 000-12-3456 666-12-3456 912-34-5678 123-00-4567 123-45-0000', []],
      ['mixed 123-45 6789, longer 1123-45-6789, 123456789', []],
      ['dots 123.45.6789', ['123.45.6789']],
      ['ip 123.45.67.89, version 1.123.45.6789, invalid 000.12.3456', []],
    ],
  ],
  [
    'ipv4',
    ipv4Recognizer,
    [
      ['from 192.168.1.20 and 10.0.0.1.', ['192.168.1.20', '10.0.0.1']],
      ['db 10.0.0.7:5432, net 10.0.0.0/8', ['10.0.0.7', '10.0.0.0']],
      ['version v1.2.3.4, 1.2.3, 256.1.1.1, 01.02.03.04, 1.2.3.4.5', []],
    ],
  ],
  [
    'ipv6',
    ipv6Recognizer,
    [
      ['host 2001:db8:85a3::8a2e:370:7334 up', ['2001:db8:85a3::8a2e:370:7334']],
      ['link fe80::1, full 2001:0db8:0000:0000:0000:ff00:0042:8329', ['fe80::1', '2001:0db8:0000:0000:0000:ff00:0042:8329']],
      ['mapped ::ffff:192.0.2.128', ['::ffff:192.0.2.128']],
      ['time 12:30:45, mac 00:1a:2b:3c:4d:5e, Foo::Bar, std::vector, a:b', []],
    ],
  ],
  [
    'secret',
    secretRecognizer,
    [
      ['openai sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12', ['sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12']],
      ['KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123', ['sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123']],
      ['aws AKIAIOSFODNN7EXAMPLE', ['AKIAIOSFODNN7EXAMPLE']],
      ['gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 and github_pat_11ABCDEFG0123456789_abcdefghij', ['ghp_abcdefghijklmnopqrstuvwxyz0123456789', 'github_pat_11ABCDEFG0123456789_abcdefghij']],
      ['slack xoxb-123456789012-abcdefABCDEF', ['xoxb-123456789012-abcdefABCDEF']],
      ['stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc', ['sk_live_4eC39HqLyjWDarjtT1zdp7dc']],
      ['google AIzaSyA-1234567890abcdefghijklmnopqrstu', ['AIzaSyA-1234567890abcdefghijklmnopqrstu']],
      ['weir wk_ab12cd34_AbCdEfGhIjKlMnOpQrStUvWx and wa_zz99yy88_0123456789abcdefghijklmn', ['wk_ab12cd34_AbCdEfGhIjKlMnOpQrStUvWx', 'wa_zz99yy88_0123456789abcdefghijklmn']],
      [
        'jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end',
        ['eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U'],
      ],
      ['pem -----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY----- after', ['-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----']],
      ['unterminated -----BEGIN PRIVATE KEY-----\nMIIE', ['-----BEGIN PRIVATE KEY-----\nMIIE']],
      ['public -----BEGIN CERTIFICATE-----\nMIIE\n-----END CERTIFICATE-----', []],
      ['short sk-abc, risk-free, task-1234, AKIA123, wk_short_x, mask-AbCdEfGhIjKlMnOpQrStUvWx12', []],
    ],
  ],
  [
    'entropy',
    createEntropyRecognizer(),
    [
      ['token Zx9Qp2Lm7Rt4Vb8Nc1Kd6Hs3Jf5Gw0Ya', ['Zx9Qp2Lm7Rt4Vb8Nc1Kd6Hs3Jf5Gw0Ya']],
      ['hex 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08', ['9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08']],
      ['uuid 123e4567-e89b-12d3-a456-426614174000 stays', []],
      ['internationalization_and_localization, get_user_by_id_2024_v2_final, 2024-01-15T10:30:00Z', []],
      ['version 1.2.3-beta.4+build.20240115 and order-number-0000123456789', []],
    ],
  ],
];

describe.each(cases)('the %s recognizer', (_name, recognizer, table) => {
  it.each(table)('%j', (text, expected) => {
    expect(found(recognizer, text)).toEqual(expected);
  });
});

describe('checks', () => {
  it('cards with mixed separators: a long run of separated digit groups is scanned once per position (no backtracking), every card in it found', () => {
    // 20,000 groups alternating blank and hyphen with no card layout in them, then one card:
    // each start position looks at most 19 digits ahead, so this stays linear in the text.
    const noise = Array.from({ length: 20_000 }, (_, i) => `${i % 2 === 0 ? '1234' : '98'}${i % 3 === 0 ? '-' : ' '}`).join('');
    const text = `${noise}x 4111-1111 1111-1111 y ${noise}z 5555 5555-5555 4444`;
    expect(found(cardRecognizer, text)).toEqual(['4111-1111 1111-1111', '5555 5555-5555 4444']);
  });
  it('Luhn accepts valid numbers and refuses a changed digit', () => {
    expect(luhnValid('4111111111111111')).toBe(true);
    expect(luhnValid('79927398713')).toBe(true);
    expect(luhnValid('4111111111111112')).toBe(false);
    expect(luhnValid('79927398710')).toBe(false);
  });
  it('IBAN mod-97 accepts the ISO 13616 examples and refuses a changed digit', () => {
    expect(ibanChecksumValid('GB82WEST12345698765432')).toBe(true);
    expect(ibanChecksumValid('DE89370400440532013000')).toBe(true);
    expect(ibanChecksumValid('GB82WEST12345698765433')).toBe(false);
  });
  it('entropy: a repeated character has none, a uniform alphabet of 16 has 4 bits', () => {
    expect(shannonEntropy('aaaa')).toBe(0);
    expect(shannonEntropy('0123456789abcdef')).toBeCloseTo(4, 10);
  });
  it('UUIDs are flagged when the profile asks for it', () => {
    expect(found(createEntropyRecognizer({ redactUuids: true }), 'id 123e4567-e89b-12d3-a456-426614174000')).toEqual(['123e4567-e89b-12d3-a456-426614174000']);
  });
});
