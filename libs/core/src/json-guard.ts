/**
 * A guard for JSON request bodies, run on the text before (or beside) `JSON.parse`: one linear
 * scan that checks nesting depth and duplicate object keys together, without building the value.
 *
 * Why: `JSON.parse` itself copes with any depth (V8's parser is iterative) and keeps the last of
 * duplicate keys silently, but everything after it that walks the value recursively — zod,
 * `JSON.stringify`, canonical hashing for idempotency, JSON Schema compilers — overflows the
 * stack on a body nested 100,000 levels deep, and a repeated key lets two readers of one body
 * (a proxy and Weir, a hash and a handler) disagree about what it says.
 *
 * Cost: strings (prompt text) are skipped with `indexOf`, keys are hashed as they are read and
 * compared with the earlier keys of their own object; there is no allocation per key for objects
 * of up to {@link LINEAR_KEYS} keys and no allocation at all for a clean body after the first
 * call. Objects with more keys switch to a `Set` (linear, not quadratic, on a hostile body).
 */

/** The default {@link JsonGuardLimits.maxDepth}: arrays and objects nested at most this deep. */
export const DEFAULT_MAX_JSON_DEPTH = 64;

/** Limits of {@link checkJsonText}. */
export interface JsonGuardLimits {
  /** Deepest nesting of arrays and objects allowed (the top-level value's container is level 1). */
  maxDepth: number;
}

/** What {@link checkJsonText} found wrong; undefined from it means nothing. */
export type JsonGuardProblem =
  /** Arrays/objects nest deeper than `maxDepth` (`path`: where the limit was crossed, `$`-rooted). */
  | { kind: 'too_deep'; maxDepth: number; path: string }
  /** An object repeats `key` (compared after unescaping); `path` is the object's path (`$`, `$.messages[0]`). */
  | { kind: 'duplicate_key'; key: string; path: string };

/** Objects with more keys than this are checked with a `Set` rather than pairwise. */
const LINEAR_KEYS = 16;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;

const ARRAY = 0;
const OBJECT = 1;

// Scratch space reused across calls (the scan is synchronous, so never shared by two scans).
let kinds = new Uint8Array(DEFAULT_MAX_JSON_DEPTH + 2);
/** Per open object: index of its first key in the key arrays. Per open array: the current element's index. */
let frameInt = new Int32Array(DEFAULT_MAX_JSON_DEPTH + 2);
let keyStart = new Int32Array(64);
let keyEnd = new Int32Array(64);
let keyHash = new Int32Array(64);
/** 1 when the key holds an escape (compare decoded). */
let keyEscaped = new Uint8Array(64);
/** Per open object with more than LINEAR_KEYS keys: its keys, decoded. */
const bigObjects: (Set<string> | undefined)[] = [];

function growKeys(): void {
  const n = keyStart.length * 2;
  const grow = <T extends Int32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
    const b = make(n);
    b.set(a);
    return b;
  };
  keyStart = grow(keyStart, (m) => new Int32Array(m));
  keyEnd = grow(keyEnd, (m) => new Int32Array(m));
  keyHash = grow(keyHash, (m) => new Int32Array(m));
  keyEscaped = grow(keyEscaped, (m) => new Uint8Array(m));
}

/** FNV-1a over UTF-16 code units (the same for a key read raw and one decoded from escapes). */
function hashString(s: string): number {
  let h = 0x811c9dc5 | 0;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h;
}

/** The key at slot `k`, decoded (only on the rare paths: escapes, big objects, errors). */
function keyText(text: string, k: number): string {
  const raw = text.slice(keyStart[k], keyEnd[k]);
  if (keyEscaped[k] === 0) return raw;
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return raw; // malformed escape: JSON.parse of the whole body reports it
  }
}

function sameKey(text: string, a: number, b: number): boolean {
  if (keyEscaped[a] === 0 && keyEscaped[b] === 0) {
    const len = keyEnd[a] - keyStart[a];
    if (len !== keyEnd[b] - keyStart[b]) return false;
    const sa = keyStart[a];
    const sb = keyStart[b];
    for (let i = 0; i < len; i++) if (text.charCodeAt(sa + i) !== text.charCodeAt(sb + i)) return false;
    return true;
  }
  return keyText(text, a) === keyText(text, b);
}

/**
 * The `$`-rooted path (`$.messages[0]`) to the child at level `upTo + 1` (`liveDepth`: the levels open): for each
 * open array its element index, for each open object the last key read at its level (the slot
 * before the first key of any object level above it). Long paths are cut (error messages only).
 */
function pathOf(text: string, upTo: number, liveDepth: number, keyCount: number): string {
  let out = '$';
  for (let d = 1; d <= upTo && out.length < 200; d++) {
    if (kinds[d] === ARRAY) {
      out += `[${frameInt[d]}]`;
      continue;
    }
    let next = keyCount;
    for (let e = d + 1; e <= liveDepth; e++) {
      if (kinds[e] === OBJECT) {
        next = frameInt[e];
        break;
      }
    }
    const k = next - 1;
    if (k >= frameInt[d]) out += `.${clip(keyText(text, k))}`;
  }
  return out.length < 200 ? out : `${out.slice(0, 200)}…`;
}

function clip(s: string): string {
  return s.length <= 64 ? s : `${s.slice(0, 64)}…`;
}

/**
 * Scans JSON `text` for nesting deeper than `limits.maxDepth` and for duplicate keys in any
 * object (the first problem in document order). Malformed JSON is not reported (the scan stops
 * where it cannot follow): parse the text as well, and let a syntax error win over a duplicate.
 * Never throws; O(text length) time (plus O(k) per key for objects of up to 16 keys).
 */
export function checkJsonText(text: string, limits: JsonGuardLimits): JsonGuardProblem | undefined {
  try {
    return scan(text, limits.maxDepth);
  } finally {
    // Drop the keys of big objects (strings of this body) rather than hold them until the next call.
    if (bigObjects.length > 0) bigObjects.length = 0;
  }
}

function scan(text: string, maxDepth: number): JsonGuardProblem | undefined {
  if (kinds.length < maxDepth + 2) {
    kinds = new Uint8Array(maxDepth + 2);
    frameInt = new Int32Array(maxDepth + 2);
  }
  const n = text.length;
  let depth = 0;
  let keyCount = 0;
  /** The next string is an object key. */
  let expectKey = false;
  let problem: JsonGuardProblem | undefined;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      if (expectKey) {
        // A key: hash it as it is read (keys are short).
        const start = i + 1;
        let j = start;
        let h = 0x811c9dc5 | 0;
        let escaped = 0;
        for (;;) {
          if (j >= n) return problem;
          const k = text.charCodeAt(j);
          if (k === QUOTE) break;
          if (k === BACKSLASH) {
            escaped = 1;
            j += 2;
            continue;
          }
          h = Math.imul(h ^ k, 0x01000193);
          j++;
        }
        if (keyCount === keyStart.length) growKeys();
        const slot = keyCount++;
        keyStart[slot] = start;
        keyEnd[slot] = j;
        keyEscaped[slot] = escaped;
        if (escaped) h = hashString(keyText(text, slot));
        keyHash[slot] = h;
        const base = frameInt[depth];
        const count = slot - base;
        let dup = false;
        if (count < LINEAR_KEYS) {
          for (let k = base; k < slot; k++) {
            if (keyHash[k] === h && sameKey(text, k, slot)) {
              dup = true;
              break;
            }
          }
        } else {
          let set = bigObjects[depth];
          if (set === undefined) {
            set = new Set<string>();
            for (let k = base; k < slot; k++) set.add(keyText(text, k));
            bigObjects[depth] = set;
          }
          const key = keyText(text, slot);
          if (set.has(key)) dup = true;
          else set.add(key);
        }
        if (dup && problem === undefined) {
          problem = { kind: 'duplicate_key', key: keyText(text, slot), path: pathOf(text, depth - 1, depth, slot) };
          // Keep scanning: a depth problem later in the body must still stop the parse.
        }
        expectKey = false;
        i = j + 1;
        continue;
      }
      // A value string: jump to its closing quote, skipping escaped quotes.
      let j = i + 1;
      for (;;) {
        j = text.indexOf('"', j);
        if (j < 0) return problem;
        let backslashes = 0;
        for (let b = j - 1; b > i && text.charCodeAt(b) === BACKSLASH; b--) backslashes++;
        if ((backslashes & 1) === 0) break;
        j++;
      }
      i = j + 1;
      continue;
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (depth === maxDepth) {
        return { kind: 'too_deep', maxDepth, path: pathOf(text, depth, depth, keyCount) };
      }
      depth++;
      if (c === OPEN_OBJECT) {
        kinds[depth] = OBJECT;
        frameInt[depth] = keyCount;
        if (depth < bigObjects.length) bigObjects[depth] = undefined;
        expectKey = true;
      } else {
        kinds[depth] = ARRAY;
        frameInt[depth] = 0;
        expectKey = false;
      }
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (depth === 0) return problem; // unbalanced: the parse reports it
      if (kinds[depth] === OBJECT) {
        keyCount = frameInt[depth];
        if (depth < bigObjects.length) bigObjects[depth] = undefined;
      }
      depth--;
      expectKey = false;
    } else if (c === COMMA && depth > 0) {
      if (kinds[depth] === OBJECT) expectKey = true;
      else frameInt[depth]++;
    }
    i++;
  }
  return problem;
}

/**
 * A client-facing sentence for a {@link JsonGuardProblem} (`what` names the body, e.g. "the
 * request body"), and the `param` to report: the duplicate key's path without `$`.
 */
export function describeJsonProblem(problem: JsonGuardProblem, what = 'the request body'): { message: string; param?: string } {
  if (problem.kind === 'too_deep') {
    return { message: `${capitalize(what)} nests deeper than ${problem.maxDepth} levels of arrays and objects (at ${problem.path}); send a flatter body.` };
  }
  const inner = problem.path.slice(1).replace(/^\./, '');
  const key = clip(problem.key);
  return {
    message: `Duplicate key ${JSON.stringify(key)} in ${inner === '' ? what : `\`${inner}\` of ${what}`}; send each key once.`,
    param: inner === '' ? key : `${inner}.${key}`,
  };
}

function capitalize(s: string): string {
  return s.length > 0 ? s[0].toUpperCase() + s.slice(1) : s;
}

/** A body size for a message: `4 MiB`, `512 KiB`, or `1000 bytes` (binary units when exact). */
export function formatBytes(n: number): string {
  if (n >= 1 << 20 && n % (1 << 20) === 0) return `${n / (1 << 20)} MiB`;
  if (n >= 1 << 10 && n % (1 << 10) === 0) return `${n / (1 << 10)} KiB`;
  return `${n} bytes`;
}
