/**
 * Reads a service's environment with zod: one schema per service, every problem reported at
 * once with the variable's name, never echoing a secret's value.
 */
import { z } from 'zod';

/** Thrown by {@link readEnv}: one line per bad variable. */
export class EnvError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid environment:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'EnvError';
  }
}

/** An integer variable with a default and bounds. */
export const envInt = (fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return fallback;
      const n = Number(v);
      if (!Number.isInteger(n) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `expected an integer from ${min} to ${max}` });
        return z.NEVER;
      }
      return n;
    });

/** A string variable with a default. */
export const envString = (fallback: string) =>
  z
    .string()
    .optional()
    .transform((v) => (v === undefined || v.trim() === '' ? fallback : v.trim()));

/** A required string variable. */
export const envRequired = (hint: string) => z.string({ message: `required: ${hint}` }).trim().min(1, `required: ${hint}`);

/**
 * Parses `env` with `shape` (keys are variable names).
 * @throws EnvError naming every bad variable and what was expected.
 */
export function readEnv<S extends z.ZodRawShape>(shape: S, env: NodeJS.ProcessEnv = process.env): z.infer<z.ZodObject<S>> {
  const result = z.object(shape).safeParse(env);
  if (result.success) return result.data;
  throw new EnvError(result.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`));
}
