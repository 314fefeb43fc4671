import type { Recognizer } from '../types';
import { DASH, DOT, UNDERSCORE, codeAt, isAlnum, isDigit, isLower, isUpper } from './chars';

type CharClass = (c: number) => boolean;
const keyChars: CharClass = (c) => isAlnum(c) || c === DASH || c === UNDERSCORE;
const alnum: CharClass = isAlnum;
const upperDigits: CharClass = (c) => isUpper(c) || isDigit(c);
const alnumUnderscore: CharClass = (c) => isAlnum(c) || c === UNDERSCORE;
const alnumDash: CharClass = (c) => isAlnum(c) || c === DASH;
const lowerDigits: CharClass = (c) => isLower(c) || isDigit(c);

/** A known credential shape: a literal prefix, then body characters (at least `min`, at most `max`). */
interface KeyShape {
  prefix: string;
  body: CharClass;
  min: number;
  max?: number;
  /** Extra check of the whole match (e.g. Weir's `wk_<8>_<secret>` layout). */
  check?: (token: string) => boolean;
}

const weirKey = (prefix: string) => (token: string) => {
  // `wk_` / `wa_` + 8 lowercase letters or digits + `_` + at least 22 base64url characters.
  const p = token.slice(3, 11);
  for (let i = 0; i < p.length; i++) if (!lowerDigits(p.charCodeAt(i))) return false;
  return token.startsWith(prefix) && p.length === 8 && token.charCodeAt(11) === UNDERSCORE && token.length >= 34;
};

/**
 * Credential shapes by prefix, longest prefix first where one prefix extends another
 * (`sk-ant-` before `sk-`). Sources: the providers' documented key formats.
 */
export const KEY_SHAPES: readonly KeyShape[] = [
  { prefix: 'sk-ant-', body: keyChars, min: 20 }, // Anthropic
  { prefix: 'sk-', body: keyChars, min: 20 }, // OpenAI (sk-…, sk-proj-…)
  { prefix: 'sk_live_', body: alnum, min: 16 }, // Stripe secret keys
  { prefix: 'sk_test_', body: alnum, min: 16 },
  { prefix: 'rk_live_', body: alnum, min: 16 }, // Stripe restricted keys
  { prefix: 'rk_test_', body: alnum, min: 16 },
  { prefix: 'whsec_', body: alnum, min: 16 }, // Stripe webhook secrets
  { prefix: 'AKIA', body: upperDigits, min: 16, max: 16 }, // AWS access key ids
  { prefix: 'ASIA', body: upperDigits, min: 16, max: 16 },
  { prefix: 'ghp_', body: alnum, min: 30 }, // GitHub tokens
  { prefix: 'gho_', body: alnum, min: 30 },
  { prefix: 'ghu_', body: alnum, min: 30 },
  { prefix: 'ghs_', body: alnum, min: 30 },
  { prefix: 'ghr_', body: alnum, min: 30 },
  { prefix: 'github_pat_', body: alnumUnderscore, min: 22 },
  { prefix: 'glpat-', body: keyChars, min: 20 }, // GitLab
  { prefix: 'xoxb-', body: alnumDash, min: 10 }, // Slack
  { prefix: 'xoxp-', body: alnumDash, min: 10 },
  { prefix: 'xoxa-', body: alnumDash, min: 10 },
  { prefix: 'xoxr-', body: alnumDash, min: 10 },
  { prefix: 'xoxs-', body: alnumDash, min: 10 },
  { prefix: 'xoxe-', body: alnumDash, min: 10 },
  { prefix: 'AIza', body: keyChars, min: 35, max: 35 }, // Google API keys
  { prefix: 'hf_', body: alnum, min: 30 }, // Hugging Face
  { prefix: 'wk_', body: keyChars, min: 31, check: weirKey('wk_') }, // Weir API keys
  { prefix: 'wa_', body: keyChars, min: 31, check: weirKey('wa_') }, // Weir admin tokens
];

/** First characters of {@link KEY_SHAPES} prefixes, for a quick test per position. */
const FIRST = new Set([...KEY_SHAPES.map((k) => k.prefix.charCodeAt(0)), 101 /* e: JWTs */]);
const JWT_SEGMENT: CharClass = keyChars;

/** Length of a JWT (`eyJ…​.​eyJ…​.​sig`) at `i`, or 0: three base64url segments, the first two at least 10 characters. */
function jwtAt(text: string, i: number): number {
  if (!text.startsWith('eyJ', i)) return 0;
  let pos = i;
  for (let seg = 0; seg < 3; seg++) {
    const s = pos;
    while (JWT_SEGMENT(codeAt(text, pos))) pos++;
    if (seg < 2 && pos - s < 10) return 0;
    if (seg < 2) {
      if (codeAt(text, pos) !== DOT) return 0;
      pos++;
    }
  }
  return pos - i;
}

/** `-----BEGIN … PRIVATE KEY-----` … `-----END … PRIVATE KEY-----` blocks; a block with no end runs to the end of the text. */
function findPem(text: string, emit: (start: number, end: number) => void): void {
  let from = 0;
  for (;;) {
    const begin = text.indexOf('-----BEGIN ', from);
    if (begin < 0) return;
    const labelEnd = text.indexOf('-----', begin + 11);
    if (labelEnd < 0 || labelEnd - begin > 80) {
      from = begin + 11;
      continue;
    }
    const label = text.slice(begin + 11, labelEnd);
    if (!label.includes('PRIVATE KEY')) {
      from = labelEnd + 5;
      continue;
    }
    const closing = `-----END ${label}-----`;
    const end = text.indexOf(closing, labelEnd + 5);
    const stop = end < 0 ? text.length : end + closing.length;
    emit(begin, stop);
    from = stop;
  }
}

/**
 * Credentials by their known shape: provider keys by prefix ({@link KEY_SHAPES}: OpenAI,
 * Anthropic, AWS, GitHub, GitLab, Slack, Stripe, Google, Hugging Face, Weir's `wk_`/`wa_`),
 * JSON Web Tokens, and PEM private-key blocks. A prefix counts only at a token's start (not
 * after a letter or digit). Linear: a position is tested against a constant number of
 * prefixes and a body is read past its minimum only when it matches.
 */
export const secretRecognizer: Recognizer = {
  type: 'secret',
  tag: 'SECRET',
  find(text, emit) {
    const spans: [number, number][] = [];
    findPem(text, (s, e) => spans.push([s, e]));
    let pem = 0;
    const n = text.length;
    for (let i = 0; i < n; i++) {
      while (pem < spans.length && spans[pem][1] <= i) {
        emit(spans[pem][0], spans[pem][1]);
        pem++;
      }
      if (pem < spans.length && spans[pem][0] <= i) {
        i = spans[pem][1] - 1;
        continue;
      }
      const c = text.charCodeAt(i);
      if (!FIRST.has(c) || isAlnum(codeAt(text, i - 1))) continue;
      const jwt = c === 101 ? jwtAt(text, i) : 0;
      if (jwt > 0) {
        emit(i, i + jwt);
        i += jwt - 1;
        continue;
      }
      for (const shape of KEY_SHAPES) {
        if (!text.startsWith(shape.prefix, i)) continue;
        const bodyStart = i + shape.prefix.length;
        let pos = bodyStart;
        while (pos - bodyStart < shape.min && shape.body(codeAt(text, pos))) pos++;
        if (pos - bodyStart < shape.min) continue;
        const max = shape.max ?? Number.POSITIVE_INFINITY;
        while (pos - bodyStart < max && shape.body(codeAt(text, pos))) pos++;
        if (shape.max !== undefined && isAlnum(codeAt(text, pos))) continue;
        if (shape.check && !shape.check(text.slice(i, pos))) continue;
        emit(i, pos);
        i = pos - 1;
        break;
      }
    }
    for (; pem < spans.length; pem++) emit(spans[pem][0], spans[pem][1]);
  },
};
