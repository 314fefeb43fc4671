/**
 * Postgres repositories for golden prompts and eval runs (tables of migration 0009). Rows
 * come back in the wire's snake_case shapes ({@link GoldenPrompt}, {@link StoredEvalRun}).
 */
import { type Kysely, type Selectable, sql } from 'kysely';
import { newId } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import type { EvalReport, GoldenMessage, GoldenPrompt } from './eval-types';
import type { ScorerSpec } from './scorers';

/** A golden prompt as created or replaced (no id, tenant or timestamp). */
export interface GoldenPromptInput {
  use_case: string;
  messages: GoldenMessage[];
  max_tokens: number;
  output_schema?: object | null;
  expected?: string | null;
}

/** Golden prompts of tenants. Every call is scoped to one tenant: another tenant's prompt is never found. */
export interface GoldenPromptStore {
  /** Stores a new prompt with a fresh id (`gp_…`). */
  create(tenantId: string, input: GoldenPromptInput): Promise<GoldenPrompt>;
  /** The tenant's prompts, of one use case when given, oldest first, at most `limit` (default 1,000). */
  list(tenantId: string, options?: { useCase?: string; limit?: number }): Promise<GoldenPrompt[]>;
  get(tenantId: string, id: string): Promise<GoldenPrompt | undefined>;
  /** Replaces a prompt's content (id and created_at kept); undefined when it does not exist. */
  replace(tenantId: string, id: string, input: GoldenPromptInput): Promise<GoldenPrompt | undefined>;
  /** Deletes a prompt; returns it as it was, or undefined when it did not exist. */
  remove(tenantId: string, id: string): Promise<GoldenPrompt | undefined>;
  /** How many prompts the tenant has for a use case. */
  count(tenantId: string, useCase: string): Promise<number>;
}

/** An eval run as stored and served by `GET /admin/v1/evals/:id`. */
export interface StoredEvalRun {
  id: string;
  tenant_id: string;
  use_case: string;
  alias: string;
  candidate_revision: string;
  stable_revision: string;
  scorer: ScorerSpec;
  threshold: number;
  status: 'running' | 'finished' | 'failed';
  /** The gate verdict; null while running or when the run failed. */
  pass: boolean | null;
  /** The report when finished, `{error: {code, message}}` when failed, null while running. */
  report: EvalReport | { error: { code: string; message: string } } | null;
  created_at: string;
  finished_at: string | null;
}

/** What starts a run. */
export interface NewEvalRun {
  tenant_id: string;
  use_case: string;
  alias: string;
  candidate_revision: string;
  stable_revision: string;
  scorer: ScorerSpec;
  /** Start time; default the database's now(). */
  created_at?: Date;
}

/** Eval runs. */
export interface EvalRunStore {
  /** Records a run in status `running` with a fresh id (`eval_…`). */
  start(run: NewEvalRun): Promise<StoredEvalRun>;
  /** Marks a run finished with its report and verdict (`report.pass`). */
  finish(id: string, report: EvalReport, finishedAt?: Date): Promise<StoredEvalRun>;
  /** Marks a run failed (a fault, not a failing gate) with the error's code and public message. */
  fail(id: string, error: { code: string; message: string }, finishedAt?: Date): Promise<StoredEvalRun>;
  get(id: string): Promise<StoredEvalRun | undefined>;
  /** A tenant's runs, newest first, at most `limit` (default 100). */
  list(tenantId: string, options?: { limit?: number }): Promise<StoredEvalRun[]>;
  /**
   * The newest finished, passing run of `candidate` on `alias` created at or after `since`
   * whose report counts at least one passed prompt (`report.totals.passed ≥ 1`); undefined when none.
   */
  latestPassing(alias: string, candidate: string, since: Date): Promise<StoredEvalRun | undefined>;
}

type GoldenRow = Selectable<WeirSchema['golden_prompts']>;
type RunRow = Selectable<WeirSchema['eval_runs']>;

function toPrompt(row: GoldenRow): GoldenPrompt {
  return {
    id: row.id,
    tenant_id: row.tenant_id,
    use_case: row.use_case,
    messages: row.messages,
    max_tokens: row.max_tokens,
    output_schema: row.output_schema,
    expected: row.expected,
    created_at: row.created_at.toISOString(),
  };
}

function toRun(row: RunRow): StoredEvalRun {
  return {
    id: row.id,
    tenant_id: row.tenant_id,
    use_case: row.use_case,
    alias: row.alias,
    candidate_revision: row.candidate_revision,
    stable_revision: row.stable_revision,
    scorer: row.scorer as unknown as ScorerSpec,
    threshold: row.threshold,
    status: row.status,
    pass: row.pass,
    report: row.report as StoredEvalRun['report'],
    created_at: row.created_at.toISOString(),
    finished_at: row.finished_at?.toISOString() ?? null,
  };
}

function promptColumns(input: GoldenPromptInput) {
  return {
    use_case: input.use_case,
    messages: JSON.stringify(input.messages),
    max_tokens: input.max_tokens,
    output_schema: input.output_schema ? JSON.stringify(input.output_schema) : null,
    expected: input.expected ?? null,
  };
}

/** Creates the golden-prompt repository over Weir's database. */
export function createGoldenPromptStore(db: Kysely<WeirSchema>): GoldenPromptStore {
  return {
    async create(tenantId, input) {
      const row = await db
        .insertInto('golden_prompts')
        .values({ id: newId('gp'), tenant_id: tenantId, ...promptColumns(input) })
        .returningAll()
        .executeTakeFirstOrThrow();
      return toPrompt(row);
    },
    async list(tenantId, options = {}) {
      let query = db.selectFrom('golden_prompts').selectAll().where('tenant_id', '=', tenantId);
      if (options.useCase !== undefined) query = query.where('use_case', '=', options.useCase);
      const rows = await query.orderBy('created_at').orderBy('id').limit(options.limit ?? 1000).execute();
      return rows.map(toPrompt);
    },
    async get(tenantId, id) {
      const row = await db.selectFrom('golden_prompts').selectAll().where('tenant_id', '=', tenantId).where('id', '=', id).executeTakeFirst();
      return row && toPrompt(row);
    },
    async replace(tenantId, id, input) {
      const row = await db.updateTable('golden_prompts').set(promptColumns(input)).where('tenant_id', '=', tenantId).where('id', '=', id).returningAll().executeTakeFirst();
      return row && toPrompt(row);
    },
    async remove(tenantId, id) {
      const row = await db.deleteFrom('golden_prompts').where('tenant_id', '=', tenantId).where('id', '=', id).returningAll().executeTakeFirst();
      return row && toPrompt(row);
    },
    async count(tenantId, useCase) {
      const row = await db
        .selectFrom('golden_prompts')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('tenant_id', '=', tenantId)
        .where('use_case', '=', useCase)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },
  };
}

/** Creates the eval-run repository over Weir's database. */
export function createEvalRunStore(db: Kysely<WeirSchema>): EvalRunStore {
  const end = async (id: string, values: { status: 'finished' | 'failed'; pass: boolean | null; report: string; finished_at: Date }) => {
    const row = await db.updateTable('eval_runs').set(values).where('id', '=', id).returningAll().executeTakeFirst();
    if (!row) throw new Error(`eval run ${id} does not exist`);
    return toRun(row);
  };
  return {
    async start(run) {
      const row = await db
        .insertInto('eval_runs')
        .values({
          id: newId('eval'),
          tenant_id: run.tenant_id,
          use_case: run.use_case,
          alias: run.alias,
          candidate_revision: run.candidate_revision,
          stable_revision: run.stable_revision,
          scorer: JSON.stringify(run.scorer),
          threshold: run.scorer.threshold,
          status: 'running',
          ...(run.created_at ? { created_at: run.created_at } : {}),
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      return toRun(row);
    },
    finish: (id, report, finishedAt = new Date()) => end(id, { status: 'finished', pass: report.pass, report: JSON.stringify(report), finished_at: finishedAt }),
    fail: (id, error, finishedAt = new Date()) => end(id, { status: 'failed', pass: null, report: JSON.stringify({ error }), finished_at: finishedAt }),
    async get(id) {
      const row = await db.selectFrom('eval_runs').selectAll().where('id', '=', id).executeTakeFirst();
      return row && toRun(row);
    },
    async list(tenantId, options = {}) {
      const rows = await db.selectFrom('eval_runs').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at', 'desc').limit(options.limit ?? 100).execute();
      return rows.map(toRun);
    },
    async latestPassing(alias, candidate, since) {
      const row = await db
        .selectFrom('eval_runs')
        .selectAll()
        .where('alias', '=', alias)
        .where('candidate_revision', '=', candidate)
        .where('pass', '=', true)
        .where('status', '=', 'finished')
        // A verdict stored before the runner required a scored success (no prompt passed) never counts.
        .where(sql<boolean>`coalesce((report->'totals'->>'passed')::numeric, 0) >= 1`)
        .where('created_at', '>=', since)
        .orderBy('created_at', 'desc')
        .limit(1)
        .executeTakeFirst();
      return row && toRun(row);
    },
  };
}
