/**
 * Redaction cost on large and adversarial texts (issue 15, item 5): each built-in recognizer and
 * a custom RE2 pattern, on texts of 256 KiB, 512 KiB and 1 MiB built to stress the scanners
 * (long digit runs, separators everywhere, `@` floods, colon/hex runs, repeated key prefixes,
 * unterminated PEM headers, one huge base64 run) and on prose with PII. Time per MiB should stay
 * flat as the size doubles (linear work); nothing is asserted, the numbers are printed.
 *
 *   node --import tsx tools/bench/redaction.ts [--rounds 3]
 *
 * The redactor caps what it scans per call (`maxChars`, default 16 KiB); this bench lifts the
 * cap to measure the scanners themselves.
 */
import { compileCustomPattern, compileProfiles, createRedactor, type Recognizer } from '@weir/redaction';

const argv = process.argv.slice(2);
const ROUNDS = Number(argv[argv.indexOf('--rounds') + 1] || 3);
const KIB = 1024;

const fill = (unit: string, size: number) => unit.repeat(Math.ceil(size / unit.length)).slice(0, size);
const prose =
  'Hi, I am Jane (jane.doe@example.com, +44 20 7946 0958). Charge 4111 1111 1111 1111, IBAN DE89 3704 0044 0532 0130 00, ssn 123-45-6789, host 10.1.2.3 / fe80::1, key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12. Order 1234567890 on 2024-01-15, version 1.2.3. ';
const TEXTS: Record<string, (size: number) => string> = {
  prose: (n) => fill(prose, n),
  digits: (n) => fill('1', n),
  'spaced digits': (n) => fill('1 ', n),
  'dashed digits': (n) => fill('12-', n),
  'at flood': (n) => fill('a@', n),
  'plus paren': (n) => fill('+(1) ', n),
  'hex colons': (n) => fill('a:', n),
  dots: (n) => fill('1.', n),
  'key prefixes': (n) => fill('sk-', n),
  'pem headers': (n) => fill('-----BEGIN ', n),
  // Separators and characters the scanners (or the redactor's normalisation) accept since the
  // issue-15 fixes: blank runs, dotted groups, full-width digits, zero-width characters,
  // Unicode local parts, quoted local parts, hyphenated IBAN-like runs glued to words.
  'tabbed digits': (n) => fill('4111\t\n ', n),
  'dotted groups': (n) => fill('4111.', n),
  'full-width digits': (n) => fill('４ ', n),
  'zero-width flood': (n) => fill('1\u200b', n),
  'unicode at flood': (n) => fill('é@', n),
  'quoted at flood': (n) => fill('"a"@', n),
  'iban-like glued': (n) => fill('acctDE89-', n),
  'base64 run': (n) => {
    let s = '';
    const a = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    let x = 12345;
    while (s.length < n) {
      x = (x * 1103515245 + 12345) >>> 0;
      s += a[x % 64];
    }
    return s;
  },
};

const compiled = compileProfiles();
if (!compiled.ok) throw new Error(compiled.errors.join('; '));
const all = compiled.profiles.get('default');
if (!all) throw new Error('no default profile');
const custom = compileCustomPattern('ticket', 'TICKET-[A-Z]{2,4}-[0-9]{3,8}');
if (!custom.ok) throw new Error(custom.message);
const recognizers: Recognizer[] = [...all.recognizers, custom.recognizer];

const sizes = [256 * KIB, 512 * KIB, 1024 * KIB];
console.log(`ms per MiB (least of ${ROUNDS} rounds), by text and size`);
console.log(['recognizer', 'text', ...sizes.map((s) => `${s / KIB} KiB`)].join('\t'));
for (const r of recognizers) {
  for (const [name, make] of Object.entries(TEXTS)) {
    const row: string[] = [];
    for (const size of sizes) {
      const text = make(size);
      let best = Number.POSITIVE_INFINITY;
      for (let k = 0; k < ROUNDS; k++) {
        const t = performance.now();
        let spans = 0;
        r.find(text, () => spans++);
        best = Math.min(best, performance.now() - t);
      }
      row.push(((best * (1024 * KIB)) / size).toFixed(1));
    }
    console.log([r.type, name, ...row].join('\t'));
  }
}
// The whole default profile through the redactor, as the content log calls it (cap lifted).
const redactor = createRedactor(all, { maxChars: 2 * 1024 * KIB, budgetMs: 60_000 });
for (const [name, make] of Object.entries(TEXTS)) {
  const text = make(1024 * KIB);
  const t = performance.now();
  const r = redactor.redact(text);
  console.log(`default profile, ${name}, 1 MiB: ${(performance.now() - t).toFixed(1)} ms (${r.ok ? 'ok' : r.reason})`);
}
// What a content-log call costs at the default cap (32 KiB) on prose.
const capped = createRedactor(all);
const text = TEXTS.prose(1024 * KIB);
let best = Number.POSITIVE_INFINITY;
for (let k = 0; k < 20; k++) {
  const t = performance.now();
  capped.redact(text);
  best = Math.min(best, performance.now() - t);
}
console.log(`default profile, prose, 1 MiB at the default 16 KiB cap: ${best.toFixed(2)} ms`);

// A 1 MiB prompt redacted for upstream (`redactChunked`, 16 KiB chunks): the total time, and the
// longest the event loop was held (the largest gap between turns seen by a ticker meanwhile).
async function chunkedRun(): Promise<void> {
  const upstream = createRedactor(all as NonNullable<typeof all>, { maxChars: 4 * 1024 * KIB, budgetMs: 60_000 });
  for (const name of ['prose', 'spaced digits', 'base64 run']) {
    const input = TEXTS[name](1024 * KIB);
    let last = performance.now();
    let longest = 0;
    let running = true;
    const tick = () => {
      const t = performance.now();
      longest = Math.max(longest, t - last);
      last = t;
      if (running) setImmediate(tick);
    };
    setImmediate(tick);
    const t0 = performance.now();
    const r = await upstream.redactChunked(input);
    running = false;
    console.log(`redactChunked, ${name}, 1 MiB: ${(performance.now() - t0).toFixed(0)} ms in all, event loop held at most ${longest.toFixed(1)} ms (${r.ok ? 'ok' : r.reason})`);
  }
}
void chunkedRun();
