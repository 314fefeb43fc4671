/**
 * `weir prompts …` and `weir evals …`: a tenant's golden prompts per use case, eval runs of a
 * candidate revision against an alias's stable revision, and their reports (the routes of
 * libs/control-plane's eval-routes.ts).
 */
import { numberFlag, UsageError } from '../args';
import { type CommandSpec, readObjectFile, said, seg, stringFlag } from './command';
import { type Column, formatDetail, formatTable, orDash, time } from './format';

/** A golden prompt as the admin API returns it. */
export interface GoldenPromptView {
  id: string;
  tenant_id: string;
  use_case: string;
  messages: Array<{ role: string; content: string }>;
  max_tokens: number;
  output_schema: object | null;
  expected: string | null;
  created_at: string;
}

/** One revision's side of a prompt in a report. */
interface EvalSide {
  revision: string;
  output: string;
  error: { code: string; message: string } | null;
  ttft_ms: number | null;
  total_ms: number;
}

/** Latency percentiles of one side (ms; null without samples). */
interface LatencySummary {
  ttft_p50_ms: number | null;
  ttft_p95_ms: number | null;
  total_p50_ms: number | null;
  total_p95_ms: number | null;
}

/** An eval report. */
export interface EvalReportView {
  scorer: { kind: string; threshold: number; metric?: string };
  allowed_errors: number;
  prompts: Array<{ prompt_id: string; stable: EvalSide; candidate: EvalSide; reference: string; score: number | null; detail: string | null; pass: boolean }>;
  totals: {
    prompts: number;
    passed: number;
    failed: number;
    unscored: number;
    candidate_errors: number;
    stable_errors: number;
    mean_score: number | null;
    candidate: LatencySummary;
    stable: LatencySummary;
  };
  pass: boolean;
  reasons: string[];
}

/** An eval run (lists carry `totals` instead of the report). */
export interface EvalRunView {
  id: string;
  tenant_id: string;
  use_case: string;
  alias: string;
  candidate_revision: string;
  stable_revision: string;
  scorer: { kind: string; threshold: number; metric?: string };
  status: 'running' | 'finished' | 'failed';
  pass: boolean | null;
  report?: EvalReportView | { error: { code: string; message: string } } | null;
  created_at: string;
  finished_at: string | null;
}

const yes = (v: unknown) => (v === null || v === undefined ? '-' : 'yes');

export const PROMPT_COLUMNS: readonly Column<GoldenPromptView>[] = [
  ['ID', (p) => p.id],
  ['USE CASE', (p) => p.use_case],
  ['MESSAGES', (p) => String(p.messages.length)],
  ['MAX TOKENS', (p) => String(p.max_tokens)],
  ['SCHEMA', (p) => yes(p.output_schema)],
  ['EXPECTED', (p) => yes(p.expected)],
  ['CREATED', (p) => time(p.created_at)],
];

const scorerText = (s: EvalRunView['scorer']) => `${s.kind}${s.metric ? `/${s.metric}` : ''} ≥ ${s.threshold}`;
const verdict = (r: Pick<EvalRunView, 'status' | 'pass'>) => (r.status !== 'finished' ? r.status : r.pass ? 'pass' : 'fail');

export const EVAL_COLUMNS: readonly Column<EvalRunView>[] = [
  ['ID', (r) => r.id],
  ['USE CASE', (r) => r.use_case],
  ['ALIAS', (r) => r.alias],
  ['CANDIDATE', (r) => r.candidate_revision],
  ['STABLE', (r) => r.stable_revision],
  ['SCORER', (r) => scorerText(r.scorer)],
  ['VERDICT', verdict],
  ['CREATED', (r) => time(r.created_at)],
];

const ms = (x: number | null) => (x === null ? '-' : `${Math.round(x)}ms`);
const score = (x: number | null) => (x === null ? '-' : x.toFixed(3));
const latency = (l: LatencySummary) => `TTFT p50 ${ms(l.ttft_p50_ms)} p95 ${ms(l.ttft_p95_ms)}, total p50 ${ms(l.total_p50_ms)} p95 ${ms(l.total_p95_ms)}`;
const indent = (text: string) => text.replace(/\n/g, '\n      ');

/**
 * An eval run as text: the verdict and why, totals, latency of both sides, one line per prompt
 * and, with `outputs`, each prompt's two outputs one after the other.
 */
export function formatEvalRun(run: EvalRunView, options: { outputs?: boolean } = {}): string {
  const head = [
    `eval ${run.id}: ${run.candidate_revision} (candidate) vs ${run.stable_revision} (stable) on alias ${run.alias}, tenant ${run.tenant_id}, use case ${run.use_case}`,
    `scorer ${scorerText(run.scorer)}; ${time(run.created_at)} → ${time(run.finished_at)}`,
    `verdict: ${verdict(run).toUpperCase()}`,
  ];
  const report = run.report;
  if (!report) return `${head.join('\n')}\n`;
  if ('error' in report) return `${head.join('\n')}\nerror: ${report.error.message} (${report.error.code})\n`;
  const t = report.totals;
  const lines = [
    ...head,
    ...report.reasons.map((r) => `  - ${r}`),
    `prompts ${t.prompts}: ${t.passed} passed, ${t.failed} failed, ${t.unscored} unscored; mean score ${score(t.mean_score)}; errors: candidate ${t.candidate_errors} (allowed ${report.allowed_errors}), stable ${t.stable_errors}`,
    `candidate ${latency(t.candidate)}`,
    `stable    ${latency(t.stable)}`,
    '',
  ];
  const table = formatTable(report.prompts, [
    ['PROMPT', (p) => p.prompt_id],
    ['SCORE', (p) => score(p.score)],
    ['PASS', (p) => (p.pass ? 'yes' : 'no')],
    ['REFERENCE', (p) => p.reference],
    ['CANDIDATE TTFT', (p) => (p.candidate.error ? `error ${p.candidate.error.code}` : ms(p.candidate.ttft_ms))],
    ['STABLE TTFT', (p) => (p.stable.error ? `error ${p.stable.error.code}` : ms(p.stable.ttft_ms))],
    ['DETAIL', (p) => orDash(p.detail)],
  ]);
  const outputs = options.outputs
    ? report.prompts.map((p) => `\n${p.prompt_id}:\n  candidate ${p.candidate.revision}:\n      ${indent(p.candidate.output)}\n  stable ${p.stable.revision}:\n      ${indent(p.stable.output)}\n`).join('')
    : '';
  return `${lines.join('\n')}\n${table}${outputs}`;
}

/** How long `evals run` waits for the report (ms): 30 minutes. */
export const EVAL_TIMEOUT_MS = 30 * 60_000;

const promptsPath = (tenant: string | undefined) => `/tenants/${seg(tenant)}/golden-prompts`;

/** The golden-prompt and eval commands. */
export const EVAL_COMMANDS: readonly CommandSpec[] = [
  {
    resource: 'prompts',
    verb: 'list',
    args: ['tenant'],
    flags: { 'use-case': { value: 'NAME', help: 'only this use case' } },
    summary: "list a tenant's golden prompts",
    async run(ctx) {
      const { data } = await ctx.api.request<{ data: GoldenPromptView[] }>('GET', promptsPath(ctx.args.tenant), { query: { use_case: stringFlag(ctx, 'use-case') } });
      return { data, text: formatTable(data, PROMPT_COLUMNS) };
    },
  },
  {
    resource: 'prompts',
    verb: 'get',
    args: ['tenant', 'id'],
    summary: 'show a golden prompt',
    async run({ api, args }) {
      const p = await api.request<GoldenPromptView>('GET', `${promptsPath(args.tenant)}/${seg(args.id)}`);
      return { data: p, text: formatDetail(p) };
    },
  },
  {
    resource: 'prompts',
    verb: 'add',
    args: ['tenant'],
    flags: {
      'use-case': { value: 'NAME', help: 'the use case it belongs to (required here or in --file)' },
      file: { value: 'FILE', help: 'the prompt, JSON or YAML: {use_case, messages, max_tokens, output_schema?, expected?}' },
      prompt: { value: 'TEXT', help: 'instead of --file: the user message' },
      system: { value: 'TEXT', help: 'with --prompt: a system message before it' },
      'max-tokens': { value: 'N', help: 'output token cap of each replay (1 to 4096; default 256 with --prompt)' },
      expected: { value: 'TEXT', help: 'a reviewed answer, the reference when the stable revision fails' },
      'output-schema': { value: 'FILE', help: 'a JSON Schema file the output must match (for the json_schema scorer)' },
    },
    summary: 'add a golden prompt to a use case, from a file or --prompt',
    async run(ctx) {
      const file = stringFlag(ctx, 'file');
      const prompt = stringFlag(ctx, 'prompt');
      if ((file === undefined) === (prompt === undefined)) throw new UsageError('prompts add: give exactly one of --file and --prompt');
      if (prompt === undefined && stringFlag(ctx, 'system') !== undefined) throw new UsageError('--system goes with --prompt; put the system message in the file');
      const body: Record<string, unknown> = file !== undefined ? readObjectFile('file', file, ctx.readFile) : {};
      if (prompt !== undefined) {
        const system = stringFlag(ctx, 'system');
        body.messages = [...(system !== undefined ? [{ role: 'system', content: system }] : []), { role: 'user', content: prompt }];
        body.max_tokens = 256;
      }
      const useCase = stringFlag(ctx, 'use-case');
      if (useCase !== undefined) body.use_case = useCase;
      if (body.use_case === undefined) throw new UsageError('prompts add: give --use-case (or use_case in the file)');
      const maxTokens = stringFlag(ctx, 'max-tokens');
      if (maxTokens !== undefined) body.max_tokens = numberFlag('max-tokens', maxTokens, { integer: true, min: 1, max: 4096 });
      const expected = stringFlag(ctx, 'expected');
      if (expected !== undefined) body.expected = expected;
      const schema = stringFlag(ctx, 'output-schema');
      if (schema !== undefined) body.output_schema = readObjectFile('output-schema', schema, ctx.readFile);
      const p = await ctx.api.request<GoldenPromptView>('POST', promptsPath(ctx.args.tenant), { body });
      return said(p, `added golden prompt ${p.id} to use case ${p.use_case} of tenant ${p.tenant_id}`);
    },
  },
  {
    resource: 'prompts',
    verb: 'delete',
    args: ['tenant', 'id'],
    summary: 'delete a golden prompt',
    async run({ api, args }) {
      const r = await api.request('DELETE', `${promptsPath(args.tenant)}/${seg(args.id)}`);
      return said(r, `deleted golden prompt ${args.id} of tenant ${args.tenant}`);
    },
  },
  {
    resource: 'evals',
    verb: 'run',
    args: ['tenant'],
    flags: {
      'use-case': { value: 'NAME', help: 'the golden prompts to replay', required: true },
      alias: { value: 'ALIAS', help: 'the alias whose stable revision is the baseline', required: true },
      candidate: { value: 'REVISION', help: 'the revision to evaluate', required: true },
      scorer: { value: 'KIND', help: 'exact, json_schema or similarity', required: true },
      threshold: { value: 'X', help: 'pass mark per prompt in (0, 1] (default 1; required for similarity, at least 0.05 there)' },
      metric: { value: 'NAME', help: 'similarity metric: token_jaccard (default) or char_trigram_cosine' },
      'allowed-errors': { value: 'N', help: 'candidate errors the gate allows (default 0)' },
      outputs: { type: 'boolean', help: "print each prompt's two outputs after the report" },
    },
    summary: 'replay a use case on a candidate and the stable revision and print the report (waits for it)',
    async run(ctx) {
      const threshold = stringFlag(ctx, 'threshold');
      const metric = stringFlag(ctx, 'metric');
      const allowed = stringFlag(ctx, 'allowed-errors');
      const body = {
        tenant: ctx.args.tenant,
        use_case: stringFlag(ctx, 'use-case'),
        alias: stringFlag(ctx, 'alias'),
        candidate_revision: stringFlag(ctx, 'candidate'),
        scorer: {
          kind: stringFlag(ctx, 'scorer'),
          ...(threshold !== undefined ? { threshold: numberFlag('threshold', threshold, { min: 0, max: 1 }) } : {}),
          ...(metric !== undefined ? { metric } : {}),
        },
        ...(allowed !== undefined ? { allowed_errors: numberFlag('allowed-errors', allowed, { integer: true, min: 0 }) } : {}),
      };
      // The API answers when the run ends: up to 50 prompts on two revisions, one call at a time.
      const run = await ctx.api.request<EvalRunView>('POST', '/evals', { body, timeoutMs: EVAL_TIMEOUT_MS });
      return { data: run, text: formatEvalRun(run, { outputs: ctx.flags.outputs === true }) };
    },
  },
  {
    resource: 'evals',
    verb: 'list',
    args: ['tenant'],
    summary: "list a tenant's eval runs, newest first",
    async run({ api, args }) {
      const { data } = await api.request<{ data: EvalRunView[] }>('GET', `/tenants/${seg(args.tenant)}/evals`);
      return { data, text: formatTable(data, EVAL_COLUMNS) };
    },
  },
  {
    resource: 'evals',
    verb: 'show',
    args: ['id'],
    flags: { outputs: { type: 'boolean', help: "print each prompt's two outputs after the report" } },
    summary: "show an eval run's report",
    async run(ctx) {
      const run = await ctx.api.request<EvalRunView>('GET', `/evals/${seg(ctx.args.id)}`);
      return { data: run, text: formatEvalRun(run, { outputs: ctx.flags.outputs === true }) };
    },
  },
];
