import { compileProfiles, createRedactor, type Redactor } from '@weir/redaction';
import type { EvalReport, EvalSide } from './eval-types';

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
