/**
 * The admin routes of golden prompts and eval runs (express 5), to mount in the admin router
 * under `/admin/v1`:
 *
 * - `GET    /tenants/:tenant/golden-prompts[?use_case=]` → `{object: 'list', data: GoldenPrompt[]}`
 * - `POST   /tenants/:tenant/golden-prompts` `{use_case, messages, max_tokens, output_schema?, expected?}` → 201 GoldenPrompt
 * - `GET    /tenants/:tenant/golden-prompts/:id` → GoldenPrompt
 * - `PUT    /tenants/:tenant/golden-prompts/:id` (same body as POST) → GoldenPrompt
 * - `DELETE /tenants/:tenant/golden-prompts/:id` → `{id, object: 'golden_prompt', deleted: true}`
 * - `POST   /evals` `{tenant, use_case, alias, candidate_revision, scorer: {kind, threshold?, metric?}, allowed_errors?}`
 *   → 201 the finished run with its report (synchronous; at most `maxPromptsPerEval` prompts)
 * - `GET    /evals/:id` → the run
 * - `GET    /tenants/:tenant/evals` → `{object: 'list', data: runs, newest first, without reports}`
 *
 * Authentication, role checks and the audit log are the admin API's: it passes its auth
 * middleware and audit writer in. Errors are thrown as WeirErrors to the admin API's error
 * handler (or `errorHandler`, when given, for a standalone router).
 */
import express, { type ErrorRequestHandler, type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import type { Kysely } from 'kysely';
import { z } from 'zod';
import { WeirError } from '@weir/core';
import { compileOutputSchema } from '@weir/gateway';
import type { WeirSchema } from '@weir/store-pg';
import { allowedErrorsProblem, runEval } from './eval-runner';
import { redactGoldenPromptForAudit, redactReport } from './redact-report';
import { createEvalRunStore, createGoldenPromptStore, type GoldenPromptInput, type StoredEvalRun } from './eval-store';
import type { EvalGenerate } from './eval-types';
import { createPgModelCatalog, type ModelCatalog, stableRevisionOf } from './model-catalog';
import { parseScorerSpec } from './scorers';

/** Golden prompts a tenant may keep per use case. */
export const MAX_GOLDEN_PROMPTS_PER_USE_CASE = 500;
/** Default {@link EvalRoutesOptions.maxPromptsPerEval}. */
export const DEFAULT_MAX_PROMPTS_PER_EVAL = 50;
/** Longest message content and `expected` (characters). */
export const MAX_GOLDEN_TEXT_CHARS = 32_000;
/** Largest `max_tokens` of a golden prompt. */
export const MAX_GOLDEN_MAX_TOKENS = 4096;

/** What the audit writer records (the actor comes from the request, which the admin API authenticated). */
export interface EvalAuditEntry {
  /** `golden_prompt.create|replace|delete`, `eval_run.create`. */
  action: string;
  entityType: 'golden_prompt' | 'eval_run';
  entityId: string;
  before: unknown;
  after: unknown;
}

/** Dependencies of {@link createEvalRouter}. */
export interface EvalRoutesDeps {
  db: Kysely<WeirSchema>;
  /**
   * Opens the generation port for one eval run and closes it after (engines are created per
   * run, e.g. {@link createEngineEvalGenerator}, so a model is not kept loaded between runs).
   */
  openGenerator(): { generate: EvalGenerate; close(): Promise<void> };
  /** Writes one audit entry for `req`'s caller. Awaited: a failing write fails the request (the change stays). */
  audit(req: Request, entry: EvalAuditEntry): Promise<void>;
  /** Runs before every route (authentication and role checks). Default: none (the router is mounted behind them). */
  auth?: RequestHandler;
  /** Appended after the routes when the router is used on its own. Default: errors go to the enclosing app's handler. */
  errorHandler?: ErrorRequestHandler;
  /** Where aliases and revisions are read. Default {@link createPgModelCatalog}(db). */
  catalog?: ModelCatalog;
}

/** Options of {@link createEvalRouter}. */
export interface EvalRoutesOptions {
  /** Largest prompt set one eval replays (a larger use case is a 400). Default {@link DEFAULT_MAX_PROMPTS_PER_EVAL}. */
  maxPromptsPerEval?: number;
  /** Evals running at once in this process; another is a 429. Default 1. */
  maxConcurrentEvals?: number;
  /** Per-generation timeout of a replay (ms). Default 60,000. */
  callTimeoutMs?: number;
}

const ID = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$/;
const id = (what: string) => z.string({ error: `expected ${what}` }).regex(ID, `expected ${what}: 1–128 letters, digits or . _ : @ / -, starting with a letter or digit`);

const promptBody = z.strictObject({
  use_case: id('a use case name'),
  messages: z
    .array(
      z.strictObject({
        role: z.enum(['system', 'developer', 'user', 'assistant'], { error: 'expected role system, developer, user or assistant' }),
        content: z.string({ error: 'expected the message text' }).max(MAX_GOLDEN_TEXT_CHARS, `expected at most ${MAX_GOLDEN_TEXT_CHARS} characters`),
      }),
      { error: 'expected a list of {role, content} messages' },
    )
    .min(1, 'expected at least one message')
    .max(50, 'expected at most 50 messages'),
  max_tokens: z.int({ error: 'expected an integer' }).min(1, 'expected at least 1').max(MAX_GOLDEN_MAX_TOKENS, `expected at most ${MAX_GOLDEN_MAX_TOKENS}`),
  output_schema: z.record(z.string(), z.unknown(), { error: 'expected a JSON Schema object' }).nullable().optional(),
  expected: z.string({ error: 'expected text' }).max(MAX_GOLDEN_TEXT_CHARS, `expected at most ${MAX_GOLDEN_TEXT_CHARS} characters`).nullable().optional(),
});

const evalBody = z.strictObject({
  tenant: id('a tenant id'),
  use_case: id('a use case name'),
  alias: id('an alias name'),
  candidate_revision: id('a revision id'),
  scorer: z.unknown(),
  allowed_errors: z.int({ error: 'expected an integer' }).min(0, 'expected 0 or more').optional(),
});

function parse<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const result = schema.safeParse(body ?? {});
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const param = issue.path.map(String).join('.') || undefined;
  const field = issue.code === 'unrecognized_keys' ? `unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.join(', ')}` : param ? `\`${param}\`: ${issue.message}` : issue.message;
  throw new WeirError('invalid_request', `Invalid request body: ${field}.`, { param: param ?? (issue.code === 'unrecognized_keys' ? issue.keys[0] : undefined) });
}

/** A run without its report (for lists). */
function summaryOf(run: StoredEvalRun): Omit<StoredEvalRun, 'report'> & { totals?: unknown } {
  const { report, ...rest } = run;
  return { ...rest, ...(report && 'totals' in report ? { totals: report.totals } : {}) };
}

/**
 * Creates the eval router. See the module comment for the routes; bodies are validated
 * strictly (unknown fields are 400s naming them).
 *
 * `POST /evals` errors: 400 for a bad body or scorer (a `threshold` of 0 included), a use case
 * without golden prompts or with more than `maxPromptsPerEval`, `allowed_errors` not below the
 * number of golden prompts, a `json_schema` scorer over prompts without `output_schema`,
 * or a candidate equal to the alias's stable revision; 404 for an unknown tenant, alias or
 * revision; 409 when the alias has no stable arm; 429 when `maxConcurrentEvals` are running.
 * A fault during the run marks it `failed` and is rethrown.
 */
export function createEvalRouter(options: EvalRoutesOptions, deps: EvalRoutesDeps): Router {
  const router = express.Router();
  const prompts = createGoldenPromptStore(deps.db);
  const runs = createEvalRunStore(deps.db);
  const catalog = deps.catalog ?? createPgModelCatalog(deps.db);
  const maxPrompts = options.maxPromptsPerEval ?? DEFAULT_MAX_PROMPTS_PER_EVAL;
  const maxConcurrent = options.maxConcurrentEvals ?? 1;
  let running = 0;

  const route =
    (fn: (req: Request, res: Response) => Promise<unknown>, status = 200) =>
    (req: Request, res: Response, next: NextFunction) => {
      fn(req, res).then((body) => {
        if (!res.headersSent) res.status(status).json(body);
      }, next);
    };
  const existingTenant = async (tenant: string): Promise<string> => {
    const row = await deps.db.selectFrom('tenants').select('id').where('id', '=', tenant).executeTakeFirst();
    if (!row) throw new WeirError('not_found', `No tenant ${JSON.stringify(tenant)}; list tenants with GET /admin/v1/tenants.`);
    return tenant;
  };
  const tenantOf = (req: Request): Promise<string> => existingTenant(String(req.params.tenant));
  const promptInput = (body: unknown): GoldenPromptInput => {
    const input = parse(promptBody, body);
    // The same check (dialect, size, depth, compilation) the gateway applies to output_schema.
    if (input.output_schema) compileOutputSchema(input.output_schema, 'output_schema');
    return input;
  };
  const notFoundPrompt = (tenant: string, promptId: string) =>
    new WeirError('not_found', `No golden prompt ${JSON.stringify(promptId)} for tenant ${tenant}; list them with GET /admin/v1/tenants/${tenant}/golden-prompts.`);

  if (deps.auth) router.use(deps.auth);
  router.use(express.json({ limit: '1mb' }));

  router.get(
    '/tenants/:tenant/golden-prompts',
    route(async (req) => {
      const tenant = await tenantOf(req);
      const useCase = req.query.use_case;
      if (useCase !== undefined && typeof useCase !== 'string') throw new WeirError('invalid_request', '`use_case` must be given once', { param: 'use_case' });
      return { object: 'list', data: await prompts.list(tenant, { useCase, limit: MAX_GOLDEN_PROMPTS_PER_USE_CASE * 10 }) };
    }),
  );
  router.post(
    '/tenants/:tenant/golden-prompts',
    route(async (req, res) => {
      const tenant = await tenantOf(req);
      const input = promptInput(req.body);
      if ((await prompts.count(tenant, input.use_case)) >= MAX_GOLDEN_PROMPTS_PER_USE_CASE) {
        throw new WeirError('conflict', `Use case ${input.use_case} of tenant ${tenant} already has ${MAX_GOLDEN_PROMPTS_PER_USE_CASE} golden prompts, the most allowed; delete some first.`);
      }
      const created = await prompts.create(tenant, input);
      // The audit copy is redacted (any admin viewer reads the audit log); the prompt is stored as given.
      await deps.audit(req, { action: 'golden_prompt.create', entityType: 'golden_prompt', entityId: created.id, before: null, after: redactGoldenPromptForAudit(created) });
      res.setHeader('location', `${req.baseUrl}/tenants/${tenant}/golden-prompts/${created.id}`);
      return created;
    }, 201),
  );
  router.get(
    '/tenants/:tenant/golden-prompts/:id',
    route(async (req) => {
      const tenant = await tenantOf(req);
      const found = await prompts.get(tenant, String(req.params.id));
      if (!found) throw notFoundPrompt(tenant, String(req.params.id));
      return found;
    }),
  );
  router.put(
    '/tenants/:tenant/golden-prompts/:id',
    route(async (req) => {
      const tenant = await tenantOf(req);
      const promptId = String(req.params.id);
      const input = promptInput(req.body);
      const before = await prompts.get(tenant, promptId);
      if (!before) throw notFoundPrompt(tenant, promptId);
      const after = await prompts.replace(tenant, promptId, input);
      if (!after) throw notFoundPrompt(tenant, promptId);
      await deps.audit(req, { action: 'golden_prompt.replace', entityType: 'golden_prompt', entityId: promptId, before: redactGoldenPromptForAudit(before), after: redactGoldenPromptForAudit(after) });
      return after;
    }),
  );
  router.delete(
    '/tenants/:tenant/golden-prompts/:id',
    route(async (req) => {
      const tenant = await tenantOf(req);
      const promptId = String(req.params.id);
      const before = await prompts.remove(tenant, promptId);
      if (!before) throw notFoundPrompt(tenant, promptId);
      await deps.audit(req, { action: 'golden_prompt.delete', entityType: 'golden_prompt', entityId: promptId, before: redactGoldenPromptForAudit(before), after: null });
      return { id: promptId, object: 'golden_prompt', deleted: true };
    }),
  );

  router.get(
    '/tenants/:tenant/evals',
    route(async (req) => ({ object: 'list', data: (await runs.list(await tenantOf(req))).map(summaryOf) })),
  );
  router.get(
    '/evals/:id',
    route(async (req) => {
      const run = await runs.get(String(req.params.id));
      if (!run) throw new WeirError('not_found', `No eval run ${JSON.stringify(String(req.params.id))}; list a tenant's runs with GET /admin/v1/tenants/{tenant}/evals.`);
      return run;
    }),
  );
  router.post(
    '/evals',
    route(async (req, res) => {
      const body = parse(evalBody, req.body);
      const scorer = parseScorerSpec(body.scorer);
      const tenant = await existingTenant(body.tenant);
      const targets = await catalog.aliasTargets(body.alias);
      if (!targets) throw new WeirError('not_found', `No alias ${JSON.stringify(body.alias)}; list aliases with GET /admin/v1/aliases.`, { param: 'alias' });
      const stable = stableRevisionOf(targets);
      if (!stable) throw new WeirError('conflict', `Alias ${body.alias} has no arm with a positive weight, so there is no stable revision to compare with.`, { param: 'alias' });
      if (body.candidate_revision === stable) {
        throw new WeirError('invalid_request', `${stable} is the stable revision of ${body.alias}; name the candidate revision to evaluate against it.`, { param: 'candidate_revision' });
      }
      if (!(await catalog.revisionCreatedAt(body.candidate_revision))) {
        throw new WeirError('not_found', `No revision ${JSON.stringify(body.candidate_revision)}; list revisions with GET /admin/v1/revisions.`, { param: 'candidate_revision' });
      }
      const set = await prompts.list(tenant, { useCase: body.use_case, limit: maxPrompts + 1 });
      if (set.length === 0) {
        throw new WeirError('invalid_request', `Tenant ${tenant} has no golden prompts for use case ${body.use_case}; add some with POST /admin/v1/tenants/${tenant}/golden-prompts.`, { param: 'use_case' });
      }
      if (set.length > maxPrompts) {
        throw new WeirError('invalid_request', `Use case ${body.use_case} has more than ${maxPrompts} golden prompts, the most one eval replays; use a narrower use case.`, { param: 'use_case' });
      }
      const allowedProblem = allowedErrorsProblem(body.allowed_errors ?? 0, set.length);
      if (allowedProblem) {
        throw new WeirError('invalid_request', `Use case ${body.use_case} has ${set.length} golden prompt${set.length === 1 ? '' : 's'}: ${allowedProblem}.`, { param: 'allowed_errors' });
      }
      if (scorer.kind === 'json_schema' && set.some((p) => !p.output_schema)) {
        throw new WeirError('invalid_request', `The json_schema scorer needs every golden prompt of ${body.use_case} to have an output_schema; ${set.filter((p) => !p.output_schema).length} have none.`, { param: 'scorer' });
      }
      if (running >= maxConcurrent) throw new WeirError('rate_limited', `${running} eval${running === 1 ? ' is' : 's are'} running; retry when it ends.`, { retryable: true, retryAfterMs: 5000 });
      running += 1;
      try {
        const run = await runs.start({ tenant_id: tenant, use_case: body.use_case, alias: body.alias, candidate_revision: body.candidate_revision, stable_revision: stable, scorer });
        const generator = deps.openGenerator();
        let finished: StoredEvalRun;
        try {
          const report = await runEval({ prompts: set, candidate: body.candidate_revision, stable, scorer, allowedErrors: body.allowed_errors, generate: generator.generate, callTimeoutMs: options.callTimeoutMs });
          // Scored on the raw outputs; stored redacted (issue 15, item 5).
          finished = await runs.finish(run.id, redactReport(report));
        } catch (err) {
          const e = err instanceof WeirError ? err : new WeirError('internal', 'the eval failed', { cause: err });
          await runs.fail(run.id, { code: e.code, message: e.message });
          throw e;
        } finally {
          await generator.close();
        }
        // The audit entry carries the verdict and totals, never output text.
        await deps.audit(req, { action: 'eval_run.create', entityType: 'eval_run', entityId: finished.id, before: null, after: summaryOf(finished) });
        res.setHeader('location', `${req.baseUrl}/evals/${finished.id}`);
        return finished;
      } finally {
        running -= 1;
      }
    }, 201),
  );

  if (deps.errorHandler) router.use(deps.errorHandler);
  return router;
}
