import { compileCustomPattern } from './custom-pattern';
import { cardRecognizer } from './recognizers/card';
import { emailRecognizer } from './recognizers/email';
import { createEntropyRecognizer } from './recognizers/entropy';
import { ibanRecognizer } from './recognizers/iban';
import { ipv4Recognizer, ipv6Recognizer } from './recognizers/ip';
import { phoneRecognizer } from './recognizers/phone';
import { secretRecognizer } from './recognizers/secrets';
import { ssnRecognizer } from './recognizers/ssn';
import { RECOGNIZER_IDS, type Recognizer, type RecognizerId, type RedactionProfileSpec, type ReplacementMode } from './types';

/** A profile compiled once (at config load): its recognizers in order, and how spans are replaced. */
export interface CompiledProfile {
  name: string;
  recognizers: readonly Recognizer[];
  replacement: ReplacementMode;
}

/**
 * The built-in profiles, always defined (a configuration may not redefine them):
 * - `default`: every built-in recognizer, tag replacement, entropy floor 24, UUIDs kept;
 * - `strict`: every built-in recognizer, hash replacement, entropy floor 20, UUIDs redacted.
 */
export const BUILT_IN_PROFILES: readonly RedactionProfileSpec[] = [
  { name: 'default', recognizers: RECOGNIZER_IDS, replacement: 'tag' },
  { name: 'strict', recognizers: RECOGNIZER_IDS, replacement: 'hash', entropyMinLength: 20, redactUuids: true },
];

/** Names of {@link BUILT_IN_PROFILES}. */
export const BUILT_IN_PROFILE_NAMES: readonly string[] = BUILT_IN_PROFILES.map((p) => p.name);

function builtIn(id: RecognizerId, spec: RedactionProfileSpec): Recognizer {
  switch (id) {
    case 'email':
      return emailRecognizer;
    case 'phone':
      return phoneRecognizer;
    case 'card':
      return cardRecognizer;
    case 'iban':
      return ibanRecognizer;
    case 'ssn':
      return ssnRecognizer;
    case 'ipv4':
      return ipv4Recognizer;
    case 'ipv6':
      return ipv6Recognizer;
    case 'secret':
      return secretRecognizer;
    case 'entropy':
      return createEntropyRecognizer({ ...(spec.entropyMinLength !== undefined ? { minLength: spec.entropyMinLength } : {}), ...(spec.redactUuids !== undefined ? { redactUuids: spec.redactUuids } : {}) });
  }
}

/** The outcome of {@link compileProfile}: the profile, or every problem found (each naming the field to fix). */
export type CompileProfileResult = { ok: true; profile: CompiledProfile } | { ok: false; errors: string[] };

/**
 * Compiles a profile spec: its built-in recognizers in {@link RECOGNIZER_IDS} order, then its
 * custom patterns (RE2, validated by `compileCustomPattern`). Errors name the field
 * (`recognizers[1]`, `custom_patterns[0].pattern`) relative to the profile.
 */
export function compileProfile(spec: RedactionProfileSpec): CompileProfileResult {
  const errors: string[] = [];
  const known = new Set<string>(RECOGNIZER_IDS);
  spec.recognizers.forEach((r, i) => {
    if (!known.has(r)) errors.push(`recognizers[${i}]: unknown recognizer '${r}'; use one of ${RECOGNIZER_IDS.join(', ')}`);
  });
  const wanted = new Set(spec.recognizers);
  const recognizers: Recognizer[] = RECOGNIZER_IDS.filter((id) => wanted.has(id)).map((id) => builtIn(id, spec));
  const names = new Set<string>();
  (spec.customPatterns ?? []).forEach((p, i) => {
    if (names.has(p.name)) errors.push(`custom_patterns[${i}].name: '${p.name}' is used twice`);
    names.add(p.name);
    if (known.has(p.name)) errors.push(`custom_patterns[${i}].name: '${p.name}' is a built-in recognizer's name`);
    const compiled = compileCustomPattern(p.name, p.pattern);
    if (compiled.ok) recognizers.push(compiled.recognizer);
    else errors.push(`custom_patterns[${i}]${compiled.message.startsWith('name') ? '.name' : '.pattern'}: ${compiled.message}`);
  });
  if (spec.entropyMinLength !== undefined && (!Number.isInteger(spec.entropyMinLength) || spec.entropyMinLength < 12 || spec.entropyMinLength > 4096)) {
    errors.push('entropy_min_length: must be an integer from 12 to 4096');
  }
  if (recognizers.length === 0 && errors.length === 0) errors.push('recognizers: a profile needs at least one recognizer or custom pattern');
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, profile: { name: spec.name, recognizers, replacement: spec.replacement ?? 'tag' } };
}

/** The outcome of {@link compileProfiles}. */
export type CompileProfilesResult = { ok: true; profiles: ReadonlyMap<string, CompiledProfile> } | { ok: false; errors: string[] };

/**
 * Compiles the built-in profiles plus `specs` (a configuration's `redaction_profiles`). Errors
 * (prefixed with the profile's name) for a spec that redefines a built-in profile or fails
 * {@link compileProfile}.
 */
export function compileProfiles(specs: readonly RedactionProfileSpec[] = []): CompileProfilesResult {
  const profiles = new Map<string, CompiledProfile>();
  const errors: string[] = [];
  for (const spec of BUILT_IN_PROFILES) {
    const r = compileProfile(spec);
    if (r.ok) profiles.set(spec.name, r.profile);
  }
  for (const spec of specs) {
    if (BUILT_IN_PROFILE_NAMES.includes(spec.name)) {
      errors.push(`${spec.name}: '${spec.name}' is a built-in profile; choose another name`);
      continue;
    }
    const r = compileProfile(spec);
    if (r.ok) profiles.set(spec.name, r.profile);
    else errors.push(...r.errors.map((e) => `${spec.name}.${e}`));
  }
  return errors.length > 0 ? { ok: false, errors } : { ok: true, profiles };
}
