/**
 * The built-in rules engine: per-tenant phrase lists and patterns, matched with RE2 (re2js) — the
 * same linear-time engine Weir uses for output-schema patterns (issue 14): no lookaround or
 * backreferences, so no pattern can take super-linear time on any text.
 */
import { RE2JS } from 're2js';
import type { TenantModerationRules } from '@weir/core';
import type { ModerationEngine, ModerationResult } from './types';

/** The largest RE2 program one category's compiled phrase list may have (instructions). */
export const MAX_RULES_PROGRAM = 200_000;
/** The largest RE2 program one pattern may have (instructions): the cap of redaction's custom patterns. */
export const MAX_PATTERN_PROGRAM = 4_000;
/** At most this many phrases and patterns per rule set. */
export const MAX_RULES = 5_000;
/** A phrase or pattern is at most this many characters. */
export const MAX_RULE_CHARS = 1_000;
/** A category name: lowercase words with `-` and `/` (OpenAI's style), at most 64 characters. */
export const CATEGORY_PATTERN = /^[a-z][a-z0-9-]*(\/[a-z][a-z0-9-]*)?$/;

interface CompiledCategory {
  category: string;
  lists?: RE2JS;
  patterns: { re: RE2JS; index: number }[];
}

/**
 * Problems of a rule set, each naming the field to fix (`rules.patterns[2].pattern: ... RE2 ...`);
 * empty when it compiles. `at` prefixes the paths.
 */
export function rulesProblems(rules: TenantModerationRules | undefined, at = 'rules'): string[] {
  const problems: string[] = [];
  if (!rules) return problems;
  const count = (rules.lists ?? []).reduce((n, l) => n + l.phrases.length, 0) + (rules.patterns ?? []).length;
  if (count > MAX_RULES) problems.push(`${at}: ${count} phrases and patterns; at most ${MAX_RULES}`);
  (rules.lists ?? []).forEach((l, i) => {
    if (!CATEGORY_PATTERN.test(l.category) || l.category.length > 64) problems.push(`${at}.lists[${i}].category: '${l.category}' is not a category name (lowercase, like 'violence' or 'self-harm/intent')`);
    if (l.phrases.length === 0) problems.push(`${at}.lists[${i}].phrases: give at least one phrase`);
    l.phrases.forEach((p, j) => {
      if (phraseForm(p).length === 0) problems.push(`${at}.lists[${i}].phrases[${j}]: a phrase must not be blank`);
      else if (p.length > MAX_RULE_CHARS) problems.push(`${at}.lists[${i}].phrases[${j}]: at most ${MAX_RULE_CHARS} characters`);
    });
  });
  (rules.patterns ?? []).forEach((p, i) => {
    if (!CATEGORY_PATTERN.test(p.category) || p.category.length > 64) problems.push(`${at}.patterns[${i}].category: '${p.category}' is not a category name (lowercase, like 'violence' or 'self-harm/intent')`);
    if (p.pattern.length === 0 || p.pattern.length > MAX_RULE_CHARS) {
      problems.push(`${at}.patterns[${i}].pattern: 1 to ${MAX_RULE_CHARS} characters`);
      return;
    }
    try {
      const re = RE2JS.compile(p.pattern);
      if (re.programSize() > MAX_PATTERN_PROGRAM) problems.push(`${at}.patterns[${i}].pattern: too complex (${re.programSize()} RE2 instructions, at most ${MAX_PATTERN_PROGRAM}); use smaller repetition counts`);
      else if (matchesEmpty(re)) problems.push(`${at}.patterns[${i}].pattern: matches the empty string, so it would flag every text; it must match at least one character (e.g. 'a+' rather than 'a*', no bare anchors)`);
    } catch (err) {
      problems.push(`${at}.patterns[${i}].pattern: does not compile with RE2 (${err instanceof Error ? err.message : String(err)}); Weir matches patterns with RE2, which has no lookaround or backreferences`);
    }
  });
  return problems;
}

/** Texts probed for an empty match: empty, a word, a space, two words, a line break (every context an anchor or `\\b`/`\\B` can match in). */
const EMPTY_PROBES = ['', 'a', ' ', 'a b', '\n'];

/**
 * Whether `re` can match the empty string somewhere (`a*`, `x?`, `^`, `\\b`, `a|`): such a
 * pattern matches every text. RE2's only zero-width assertions are anchors and word
 * boundaries, so probing each kind of position finds every such pattern. Config load only.
 */
export function matchesEmpty(re: RE2JS): boolean {
  for (const probe of EMPTY_PROBES) {
    const m = re.matcher(probe);
    while (m.find()) if (m.end() === m.start()) return true;
  }
  return false;
}

/** Zero-width and other format characters (Unicode `Cf`: U+200B–U+200D, U+2060, U+FEFF, U+00AD, bidi controls, ...). */
const FORMAT_CHARS = /\p{Cf}/gu;
/** Every Unicode space separator, line and paragraph separator (NBSP, em space, ideographic space, U+2028, ...). */
const UNICODE_SPACES = /[\p{Zs}\u2028\u2029]/gu;
/** Zero-width characters that separate words (a zero-width space) rather than join them. */
const ZERO_WIDTH_SEPARATORS = /[\u200B\u2060\uFEFF]/gu;
const HAS_FORMAT_CHAR = /\p{Cf}/u;

/**
 * The forms of `text` rules are matched against (linear time): NFKC (full-width and
 * compatibility forms folded), every Unicode space as `' '`, format characters removed — and,
 * when the text has zero-width separators, a second form with them as `' '` (so `red\u200Bdragon`
 * matches the phrase `red dragon`, and `dra\u200Bgon` matches `dragon`). A text is flagged
 * when any form matches.
 */
export function normalizedForms(text: string): string[] {
  const spaced = text.normalize('NFKC').replace(UNICODE_SPACES, ' ');
  if (!HAS_FORMAT_CHAR.test(spaced)) return [spaced];
  const stripped = spaced.replace(FORMAT_CHARS, '');
  const separated = spaced.replace(ZERO_WIDTH_SEPARATORS, ' ').replace(FORMAT_CHARS, '');
  return separated === stripped ? [stripped] : [stripped, separated];
}

/** A phrase in the form texts are matched in (NFKC, Unicode spaces as `' '`, no format characters), trimmed. */
function phraseForm(phrase: string): string {
  return phrase.normalize('NFKC').replace(UNICODE_SPACES, ' ').replace(FORMAT_CHARS, '').trim();
}

/** A phrase as an RE2 fragment: its words quoted, any whitespace run between them, word boundaries where the phrase starts or ends with a word character. */
function phraseFragment(phrase: string): string {
  const t = phraseForm(phrase);
  const words = t.split(/\s+/).map((w) => RE2JS.quote(w));
  const body = words.join('\\s+');
  const start = /^\w/.test(t) ? '\\b' : '';
  const end = /\w$/.test(t) ? '\\b' : '';
  return `${start}${body}${end}`;
}

/**
 * Compiles rule sets (later ones add to earlier ones) into an engine. Each category's phrases
 * become one RE2 alternation (case-insensitive); each pattern stays its own program. A text is
 * flagged in every category one of whose rules matches it; `reason` names the first (`list:<cat>`
 * or `pattern:<cat>#<index>`), never the text. Throws `Error` with {@link rulesProblems}' message
 * when a rule set does not compile (validate first).
 */
export function createRulesEngine(name: string, ruleSets: (TenantModerationRules | undefined)[]): ModerationEngine {
  const byCategory = new Map<string, { phrases: string[]; patterns: { pattern: string; index: number }[] }>();
  const of = (c: string) => {
    let e = byCategory.get(c);
    if (!e) byCategory.set(c, (e = { phrases: [], patterns: [] }));
    return e;
  };
  for (const rules of ruleSets) {
    const problems = rulesProblems(rules);
    if (problems.length > 0) throw new Error(problems.join('; '));
    for (const l of rules?.lists ?? []) of(l.category).phrases.push(...l.phrases);
    (rules?.patterns ?? []).forEach((p, index) => of(p.category).patterns.push({ pattern: p.pattern, index }));
  }
  const compiled: CompiledCategory[] = [...byCategory].map(([category, e]) => {
    const lists = e.phrases.length > 0 ? RE2JS.compile(`(?:${e.phrases.map(phraseFragment).join('|')})`, RE2JS.CASE_INSENSITIVE) : undefined;
    if (lists && lists.programSize() > MAX_RULES_PROGRAM) throw new Error(`rules.lists: the '${category}' phrases make ${lists.programSize()} RE2 instructions, at most ${MAX_RULES_PROGRAM}; split or shorten them`);
    return { category, ...(lists ? { lists } : {}), patterns: e.patterns.map((p) => ({ re: RE2JS.compile(p.pattern), index: p.index })) };
  });
  const judge = (raw: string): ModerationResult => {
    const categories: Record<string, boolean> = {};
    const scores: Record<string, number> = {};
    let reason: string | undefined;
    const forms = normalizedForms(raw);
    for (const c of compiled) {
      let hit = c.lists !== undefined && forms.some((text) => (c.lists as RE2JS).test(text));
      if (hit) reason ??= `list:${c.category}`;
      if (!hit) {
        for (const p of c.patterns) {
          if (forms.some((text) => p.re.test(text))) {
            hit = true;
            reason ??= `pattern:${c.category}#${p.index}`;
            break;
          }
        }
      }
      categories[c.category] = hit;
      scores[c.category] = hit ? 1 : 0;
    }
    const flagged = reason !== undefined;
    return { flagged, categories, category_scores: scores, ...(flagged ? { reason } : {}) };
  };
  return {
    name,
    kind: 'rules',
    async check(texts, signal) {
      const out: ModerationResult[] = [];
      for (const t of texts) {
        if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('moderation check aborted');
        out.push(judge(t));
      }
      return out;
    },
  };
}
