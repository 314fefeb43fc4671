import { RE2JS } from 're2js';
import type { Recognizer } from './types';

/** Longest custom pattern accepted (characters). */
export const MAX_PATTERN_CHARS = 1_000;
/** Largest compiled RE2 program accepted (instructions): bounds the work per character. */
export const MAX_PROGRAM_SIZE = 4_000;
/** A custom pattern's name: what it is counted as and (upper-cased) its tag. */
export const PATTERN_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

/** The outcome of {@link compileCustomPattern}. */
export type CompiledPattern = { ok: true; recognizer: Recognizer } | { ok: false; message: string };

/**
 * Compiles a custom pattern with RE2 (re2js: linear-time matching, no back-references or
 * look-around). Refuses, with a message saying what to fix: a bad name, an empty or over-long
 * pattern, RE2 syntax errors, a program over {@link MAX_PROGRAM_SIZE}, and a pattern that matches
 * the empty string (it would match everywhere). Runs at config load, never per request.
 */
export function compileCustomPattern(name: string, pattern: string): CompiledPattern {
  if (!PATTERN_NAME.test(name)) return { ok: false, message: `name '${name}' must be a letter then up to 63 letters, digits, '_' or '-'` };
  if (pattern.length === 0) return { ok: false, message: 'pattern is empty' };
  if (pattern.length > MAX_PATTERN_CHARS) return { ok: false, message: `pattern is ${pattern.length} characters; at most ${MAX_PATTERN_CHARS}` };
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern);
  } catch (err) {
    const detail = err instanceof Error ? err.message : String(err);
    return { ok: false, message: `not a valid RE2 pattern (${detail}); RE2 has no back-references or look-around` };
  }
  if (re.programSize() > MAX_PROGRAM_SIZE) return { ok: false, message: `pattern compiles to ${re.programSize()} instructions; at most ${MAX_PROGRAM_SIZE} (simplify repetitions)` };
  if (re.matches('')) return { ok: false, message: 'pattern matches the empty string; it must match at least one character' };
  const tag = name.toUpperCase().replace(/-/g, '_');
  return {
    ok: true,
    recognizer: {
      type: name,
      tag,
      find(text, emit) {
        const m = re.matcher(text);
        while (m.find()) {
          const s = m.start();
          const e = m.end();
          if (e > s) emit(s, e);
        }
      },
    },
  };
}
