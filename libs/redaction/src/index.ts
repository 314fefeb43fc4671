/**
 * `@weir/redaction`: PII and secret redaction before any content reaches a log, a trace, an eval
 * store or an event (issue 15, item 5). Built-in recognizers are hand-written linear scanners;
 * custom patterns run on RE2 (re2js). A redactor's work per call is bounded and its failures are
 * results, so callers fail closed.
 */
export * from './types';
export { compileCustomPattern, MAX_PATTERN_CHARS, MAX_PROGRAM_SIZE, PATTERN_NAME, type CompiledPattern } from './custom-pattern';
export { BUILT_IN_PROFILES, BUILT_IN_PROFILE_NAMES, compileProfile, compileProfiles, type CompiledProfile, type CompileProfileResult, type CompileProfilesResult } from './profiles';
export { createRedactor, DEFAULT_BUDGET_MS, DEFAULT_MAX_CHARS, type RedactionResult, type Redactor, type RedactorOptions, type RedactorProfile } from './redactor';
export { emailRecognizer } from './recognizers/email';
export { phoneRecognizer } from './recognizers/phone';
export { cardRecognizer, knownIssuer, luhnValid } from './recognizers/card';
export { ibanChecksumValid, ibanRecognizer, IBAN_LENGTHS } from './recognizers/iban';
export { ssnRecognizer, ssnValid } from './recognizers/ssn';
export { ipv4Recognizer, ipv6Recognizer, ipv6Valid } from './recognizers/ip';
export { KEY_SHAPES, secretRecognizer } from './recognizers/secrets';
export { createEntropyRecognizer, isUuid, shannonEntropy, type EntropyOptions } from './recognizers/entropy';
