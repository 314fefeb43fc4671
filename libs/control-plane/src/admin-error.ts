import { WeirError, toWeirError } from '@weir/core';
import { HTTP_ERRORS } from '@weir/streaming';
import type { ConfigProblem } from '@weir/config';

/**
 * A change the control plane refused because the configuration it would produce is invalid
 * (`parseConfig` found problems). Nothing was committed. HTTP 400 `invalid_config`, with every
 * problem listed.
 */
export class InvalidChangeError extends WeirError {
  /** Every problem, as `parseConfig` reported it (`path` in the composed configuration's naming). */
  readonly problems: readonly ConfigProblem[];

  constructor(problems: readonly ConfigProblem[], options: { cause?: unknown } = {}) {
    const listed = problems.map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join('; ');
    super('invalid_request', `The change would make the configuration invalid, so nothing was saved: ${listed}`, options);
    this.name = 'InvalidChangeError';
    this.problems = problems;
  }
}

/** The admin API's error body: OpenAI's shape, plus `problems` for an invalid change. */
export interface AdminErrorBody {
  error: { message: string; type: string; param: string | null; code: string; problems?: ConfigProblem[] };
}

/** Maps any thrown value to its HTTP status and body (a non-Weir error is a 500 with a generic message). */
export function adminErrorResponse(err: unknown): { status: number; body: AdminErrorBody } {
  const e = toWeirError(err);
  // The one code → HTTP table every Weir HTTP edge uses.
  const mapping = HTTP_ERRORS[e.code];
  const code = e instanceof InvalidChangeError ? 'invalid_config' : e.code;
  return {
    status: mapping.status,
    body: {
      error: {
        message: e.message,
        type: mapping.type,
        param: e.param ?? null,
        code,
        ...(e instanceof InvalidChangeError ? { problems: [...e.problems] } : {}),
      },
    },
  };
}

/** A 404 naming what was not found and how to find the right one. */
export function notFound(what: string, id: string, hint: string): WeirError {
  return new WeirError('not_found', `No ${what} ${JSON.stringify(id)}; ${hint}.`);
}
