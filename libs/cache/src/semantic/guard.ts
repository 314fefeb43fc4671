/**
 * The semantic tier's guard: two prompts an embedding finds near (cosine 0.98 and more) can
 * still ask opposite things — "Is it safe to take aspirin?" / "Is it not safe to take
 * aspirin?", "Convert 5 miles" / "Convert 50 miles", "capital of France" / "capital of Spain".
 * Embeddings are weak at exactly these tokens, so a hit whose prompts differ in any of them is
 * turned into a miss. The guard compares a {@link GuardSignature} extracted once per prompt:
 *
 * - **negations**: not, no, never, none, nobody, nothing, nowhere, neither, nor, without,
 *   cannot, and every `n't` contraction (don't, isn't, won't, can't …), as a multiset;
 * - **numbers**: digit runs (`1,000` → `1000`, decimals and signs kept) and number words
 *   (zero … twenty, the tens, hundred, thousand, million, billion, trillion; ordinals
 *   first … twelfth; once, twice, half, dozen), words mapped to their digits so "two" and "2"
 *   agree; as a multiset in order of appearance;
 * - **named entities**: tokens with a capital letter that are not at the start of a sentence
 *   (`I` and its contractions excepted), plus a capitalised sentence-initial token that is not
 *   a common sentence opener ({@link SENTENCE_OPENERS}: function words, question words and the
 *   usual imperative verbs), so "Paris is …" / "London is …" still differ; as a set;
 * - **quoted strings**: the contents of "…", “…”, '…' (at word boundaries, not an
 *   apostrophe), ‘…’, `…`, «…», exactly, as a multiset.
 *
 * A false "differ" costs a cache miss (the request runs); a false "same" serves a wrong answer.
 * The rules therefore err towards "differ".
 */

/** What the guard compares of a prompt; stored with an entry instead of its text. */
export interface GuardSignature {
  /** Negation markers, lower-cased, sorted (a multiset). */
  negations: string[];
  /** Numbers, normalised to digits, in order of appearance. */
  numbers: string[];
  /** Named entities (case kept), sorted, unique. */
  entities: string[];
  /** Quoted strings' contents, sorted (a multiset). */
  quotes: string[];
}

/** Why the guard refused a match: the first category in which the prompts differ. */
export type GuardReason = 'negation' | 'number' | 'entity' | 'quote';

const NEGATION_WORDS = new Set(['not', 'no', 'never', 'none', 'nobody', 'nothing', 'nowhere', 'neither', 'nor', 'without', 'cannot', 'noone']);

const NUMBER_WORDS: ReadonlyMap<string, string> = new Map([
  ['zero', '0'], ['one', '1'], ['two', '2'], ['three', '3'], ['four', '4'], ['five', '5'], ['six', '6'], ['seven', '7'], ['eight', '8'], ['nine', '9'],
  ['ten', '10'], ['eleven', '11'], ['twelve', '12'], ['thirteen', '13'], ['fourteen', '14'], ['fifteen', '15'], ['sixteen', '16'], ['seventeen', '17'],
  ['eighteen', '18'], ['nineteen', '19'], ['twenty', '20'], ['thirty', '30'], ['forty', '40'], ['fifty', '50'], ['sixty', '60'], ['seventy', '70'],
  ['eighty', '80'], ['ninety', '90'], ['hundred', '100'], ['thousand', '1000'], ['million', '1000000'], ['billion', '1000000000'], ['trillion', '1000000000000'],
  ['first', '1st'], ['second', '2nd'], ['third', '3rd'], ['fourth', '4th'], ['fifth', '5th'], ['sixth', '6th'], ['seventh', '7th'], ['eighth', '8th'],
  ['ninth', '9th'], ['tenth', '10th'], ['eleventh', '11th'], ['twelfth', '12th'], ['once', '1x'], ['twice', '2x'], ['half', '0.5'], ['dozen', '12'],
]);

/**
 * Capitalised words that commonly open a sentence without naming anything: at a sentence start
 * they are not taken as entities (any other capitalised sentence-initial word is).
 */
export const SENTENCE_OPENERS: ReadonlySet<string> = new Set([
  'a', 'an', 'the', 'this', 'that', 'these', 'those', 'it', 'its', 'there', 'here', 'he', 'she', 'we', 'they', 'you', 'your', 'my', 'our', 'their',
  'his', 'her', 'me', 'us', 'them', 'what', 'whats', 'how', 'why', 'when', 'where', 'who', 'whom', 'whose', 'which', 'is', 'are', 'was', 'were', 'be',
  'am', 'do', 'does', 'did', 'can', 'could', 'will', 'would', 'shall', 'should', 'may', 'might', 'must', 'have', 'has', 'had', 'if', 'and', 'or',
  'but', 'so', 'then', 'also', 'please', 'tell', 'write', 'give', 'explain', 'describe', 'list', 'show', 'make', 'create', 'summarize', 'summarise',
  'translate', 'find', 'compute', 'calculate', 'convert', 'define', 'compare', 'help', 'let', 'lets', 'let\'s', 'suggest', 'name', 'in', 'on', 'at',
  'for', 'from', 'to', 'of', 'with', 'by', 'about', 'after', 'before', 'as', 'all', 'any', 'some', 'each', 'every', 'hi', 'hello', 'hey', 'thanks',
  'thank', 'yes', 'ok', 'okay', 'now', 'again', 'answer', 'generate', 'rewrite', 'fix', 'check', 'use', 'using', 'consider', 'assume', 'imagine',
  'once', 'user', 'assistant', 'system', 'question', 'q', 'note',
]);

// Quoted spans. Straight single quotes count only at word boundaries, so "don't" is no quote.
const QUOTE_PATTERNS: readonly RegExp[] = [/"([^"\n]{1,500})"/g, /“([^”\n]{1,500})”/g, /‘([^’\n]{1,500})’/g, /«([^»\n]{1,500})»/g, /`([^`\n]{1,500})`/g, /(?<![\p{L}\p{N}])'([^'\n]{1,500})'(?![\p{L}\p{N}])/gu];

// Words (letters, digits, apostrophes inside), numbers with separators, and sentence punctuation.
const TOKEN = /(?:(?<![\p{L}\p{N}])-)?\d+(?:,\d{3})*(?:\.\d+)?|[\p{L}\p{N}]+(?:['’][\p{L}]+)*|[.!?\n:;]/gu;

/** Extracts what the guard compares (see the module comment). O(length of the text). */
export function guardSignatureOf(text: string): GuardSignature {
  const negations: string[] = [];
  const numbers: string[] = [];
  const entities = new Set<string>();
  const quotes: string[] = [];
  for (const pattern of QUOTE_PATTERNS) {
    for (const m of text.matchAll(pattern)) quotes.push(m[1]);
  }
  let sentenceStart = true;
  for (const m of text.matchAll(TOKEN)) {
    const token = m[0];
    if (token === '.' || token === '!' || token === '?' || token === '\n' || token === ':' || token === ';') {
      sentenceStart = true;
      continue;
    }
    const atStart = sentenceStart;
    sentenceStart = false;
    if (/^-?\d/.test(token)) {
      // Thousands separators dropped (`1,000` = `1000`); a minus sign kept (`-5` ≠ `5`).
      numbers.push(token.replace(/,/g, ''));
      continue;
    }
    const lower = token.toLowerCase().replace(/’/g, "'");
    if (NEGATION_WORDS.has(lower) || lower.endsWith("n't")) {
      negations.push(lower.endsWith("n't") ? "n't" : lower);
    }
    const numberWord = NUMBER_WORDS.get(lower);
    if (numberWord !== undefined) numbers.push(numberWord);
    if (/\d/.test(token)) {
      // A word holding digits (gpt4, v2): its digits are a number.
      for (const d of token.match(/\d+/g) ?? []) numbers.push(d);
    }
    if (/\p{Lu}/u.test(token) && !isFirstPerson(lower)) {
      const opener = SENTENCE_OPENERS.has(lower) && token.slice(1) === token.slice(1).toLowerCase();
      if (!atStart || !opener) entities.add(token);
    }
  }
  return { negations: negations.sort(), numbers, entities: [...entities].sort(), quotes: quotes.sort() };
}

function isFirstPerson(lower: string): boolean {
  return lower === 'i' || lower.startsWith("i'");
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * Compares two signatures: undefined when they agree in every category, else the first
 * category that differs (negation, number, entity, quote).
 */
export function guardDifference(a: GuardSignature, b: GuardSignature): GuardReason | undefined {
  if (!sameList(a.negations, b.negations)) return 'negation';
  if (!sameList(a.numbers, b.numbers)) return 'number';
  if (!sameList(a.entities, b.entities)) return 'entity';
  if (!sameList(a.quotes, b.quotes)) return 'quote';
  return undefined;
}
