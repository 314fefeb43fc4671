/**
 * The shapes shared by recognizers, profiles and the redactor.
 */

/**
 * The built-in recognizers, by id (the value of the `type` label of `weir_redactions_total`,
 * and the names a profile's `recognizers` list takes):
 * - `email`: e-mail addresses;
 * - `phone`: phone numbers, international (`+` and 8–15 digits) and common national formats;
 * - `card`: payment card numbers (13–19 digits, Luhn-checked, known issuer prefixes);
 * - `iban`: IBANs (mod-97 checked);
 * - `ssn`: US social security numbers (the invalid ranges excluded);
 * - `ipv4`, `ipv6`: IP addresses;
 * - `secret`: credentials by their known shape (provider key prefixes, JWTs, PEM private keys, Weir keys);
 * - `entropy`: other high-entropy tokens (Shannon entropy over a length floor).
 */
export const RECOGNIZER_IDS = ['email', 'phone', 'card', 'iban', 'ssn', 'ipv4', 'ipv6', 'secret', 'entropy'] as const;

/** One of {@link RECOGNIZER_IDS}. */
export type RecognizerId = (typeof RECOGNIZER_IDS)[number];

/** A span of text a recognizer found: `[start, end)` in UTF-16 code units. */
export interface Span {
  start: number;
  end: number;
  /** The type it is counted and tagged as: a recognizer id, or a custom pattern's name. */
  type: string;
  /** The replacement tag (`EMAIL` in `[REDACTED:EMAIL]`). */
  tag: string;
}

/**
 * A recognizer: finds the spans of one kind in a text, in one pass of linear time over it
 * (hand-written scanners, or RE2 for custom patterns), never a backtracking regular expression.
 */
export interface Recognizer {
  /** The type spans are counted as (metrics label `type`). */
  readonly type: string;
  /** The replacement tag. */
  readonly tag: string;
  /**
   * Calls `emit(start, end)` for every span found in `text`, in increasing `start` order.
   * Throws only on a fault (the redactor then fails closed).
   */
  find(text: string, emit: (start: number, end: number) => void): void;
}

/** How a span is replaced: `tag` → `[REDACTED:EMAIL]`; `hash` → `[REDACTED:EMAIL:3f9a1c0b2d4e]` (see `createRedactor`). */
export type ReplacementMode = 'tag' | 'hash';

/** A custom pattern of a profile: an RE2 expression (compiled once, at config load). */
export interface CustomPatternSpec {
  /** Its name: the metrics `type` and the tag (upper-cased). Letters, digits, `_` and `-`, 1–64 characters. */
  name: string;
  /** RE2 syntax (no back-references or look-around). */
  pattern: string;
}

/** A named redaction profile, as configuration holds it. */
export interface RedactionProfileSpec {
  /** The profile's name (what a tenant's `redactionProfile` names). */
  name: string;
  /** The built-in recognizers it runs. */
  recognizers: readonly string[];
  /** Custom RE2 patterns it runs besides. Default none. */
  customPatterns?: readonly CustomPatternSpec[];
  /** How spans are replaced. Default `tag`. */
  replacement?: ReplacementMode;
  /**
   * Shortest token (characters) the `entropy` recognizer considers. Default 24 (20 in
   * `strict`); never below 12.
   */
  entropyMinLength?: number;
  /** Whether UUIDs count as secrets (`entropy`). Default false (`strict`: true). */
  redactUuids?: boolean;
}
