import { compileProfiles, createRedactor, type Redactor } from '@weir/redaction';
import type { EvalReport, EvalSide, GoldenPrompt } from './eval-types';

/** What an output is stored as when its redaction fails (fail closed). */
export const WITHHELD_OUTPUT = '[WITHHELD: redaction failed]';

/** The built-in `default` profile over at most 16 KiB per output (the rest dropped with a marker). */
function defaultRedactor(): Redactor {
  const compiled = compileProfiles();
  const profile = compiled.ok ? compiled.profiles.get('default') : undefined;
  if (!profile) throw new Error('the built-in default redaction profile did not compile');
  return createRedactor(profile, { maxChars: 16_384, budgetMs: 1_000 });
}

let shared: Redactor | undefined;

/**
 * The report as the eval store keeps it (issue 15, item 5): every side's output and error
 * message redacted with the built-in `default` profile (`@weir/redaction`) — scores were computed
 * on the raw outputs before this. An output whose redaction fails or runs over its budget is
 * stored as {@link WITHHELD_OUTPUT}. Golden prompts themselves are the tenant's test data,
 * stored as given.
 */
export function redactReport(report: EvalReport, redactor: Redactor = (shared ??= defaultRedactor())): EvalReport {
  const text = (s: string) => {
    if (s.length === 0) return s;
    const r = redactor.redact(s);
    return r.ok ? r.text : WITHHELD_OUTPUT;
  };
  const side = (s: EvalSide): EvalSide => ({ ...s, output: text(s.output), error: s.error ? { ...s.error, message: text(s.error.message) } : null });
  return { ...report, prompts: report.prompts.map((p) => ({ ...p, stable: side(p.stable), candidate: side(p.candidate) })) };
}

/** What a golden prompt's text is recorded as in the audit log when its redaction fails (fail closed). */
export const WITHHELD_TEXT = '[WITHHELD: redaction failed]';

/** Redacts every string of a JSON value (object keys kept), at most `depth` levels deep (deeper values withheld). */
function redactJson(value: unknown, text: (s: string) => string, depth = 32): unknown {
  if (typeof value === 'string') return text(value);
  if (value === null || typeof value !== 'object') return value;
  if (depth <= 0) return WITHHELD_TEXT;
  if (Array.isArray(value)) return value.map((v) => redactJson(v, text, depth - 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactJson(v, text, depth - 1)]));
}

/**
 * A golden prompt as the audit log records it (`golden_prompt.create|replace|delete`, `before`
 * and `after`): every message's content, `expected` and the string values of `output_schema`
 * redacted with the built-in `default` profile; ids, use case, roles, `max_tokens` and dates kept.
 * A text whose redaction fails or runs over budget is recorded as {@link WITHHELD_TEXT}. The
 * golden prompt itself is stored as given (the tenant's test data, replayed verbatim); only its
 * audit copy — readable by any admin `viewer` — is redacted.
 */
export function redactGoldenPromptForAudit(prompt: GoldenPrompt, redactor: Redactor = (shared ??= defaultRedactor())): GoldenPrompt {
  const text = (s: string) => {
    if (s.length === 0) return s;
    const r = redactor.redact(s);
    return r.ok ? r.text : WITHHELD_TEXT;
  };
  return {
    ...prompt,
    messages: prompt.messages.map((m) => ({ ...m, content: text(m.content) })),
    expected: prompt.expected === null ? null : text(prompt.expected),
    output_schema: prompt.output_schema === null ? null : (redactJson(prompt.output_schema, text) as object),
  };
}
