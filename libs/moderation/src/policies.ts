/**
 * Tenants' moderation policies compiled once per configuration (never per request): engines
 * built, rules compiled, and a precomputed "nothing to do" so the request path of a tenant
 * without moderation pays one map lookup.
 */
import { type ModerationEngineSpec, type ModerationFailMode, type PlatformConfig, type TenantModeration, type TenantSpec } from '@weir/core';
import { createOpenAiModerationEngine } from './openai-engine';
import { createRulesEngine, rulesProblems } from './rules-engine';
import type { ModerationEngine, ModerationFailure, ModerationObserver, ModerationVerdict } from './types';
import { windowsOf } from './window';

/** The engine name every configuration has: the built-in rules engine over the tenant's own rules. */
export const BUILTIN_RULES_ENGINE = 'rules';

/** How one stage runs for a tenant. */
export interface StagePlan {
  engine: ModerationEngine;
  /** Categories that block; undefined = any the engine flags. */
  blockOn?: ReadonlySet<string>;
  fail: ModerationFailMode;
  timeoutMs: number;
}

/** Output stage: a {@link StagePlan} with its window. */
export interface OutputPlan extends StagePlan {
  windowChars: number;
  overlapChars: number;
}

/** A tenant's compiled policy. */
export interface TenantModerationPlan {
  input?: StagePlan;
  output?: OutputPlan;
  /** What `POST /v1/moderations` runs: the input engine, else the output engine, else the tenant's rules. */
  api: ModerationEngine;
}

/** Every tenant's compiled moderation, by tenant key (`uid ?? id`, what `tenantKeyOf(caller)` gives). */
export interface ModerationPolicies {
  /** Undefined when the tenant has no moderation policy (the fast path). */
  of(tenantKey: string): TenantModerationPlan | undefined;
  /** Any tenant has a policy. */
  readonly any: boolean;
  /** Named engines (for `/v1/moderations` of a tenant without a policy: its rules, usually none). */
  engine(name: string): ModerationEngine | undefined;
}

/** Options of {@link compileModerationPolicies}. */
export interface CompileOptions {
  /** Environment for engines' `api_key_env` (default `process.env`). */
  env?: Record<string, string | undefined>;
  /** The egress-checked undici dispatcher for `openai` engines. */
  dispatcher?: unknown;
  /** Default the global `fetch`. */
  fetch?: typeof fetch;
}

/** Builds the named engines of a configuration (`rules` engines have only their own rules here). */
function buildEngine(spec: ModerationEngineSpec, options: CompileOptions): ModerationEngine {
  if (spec.kind === 'rules') return createRulesEngine(spec.name, [spec.rules]);
  const env = options.env ?? process.env;
  const apiKey = spec.apiKeyEnv !== undefined ? env[spec.apiKeyEnv] : undefined;
  return createOpenAiModerationEngine({
    name: spec.name,
    baseUrl: spec.baseUrl,
    ...(apiKey ? { apiKey } : {}),
    ...(spec.model !== undefined ? { model: spec.model } : {}),
    ...(spec.timeoutMs !== undefined ? { timeoutMs: spec.timeoutMs } : {}),
    ...(options.dispatcher !== undefined ? { dispatcher: options.dispatcher } : {}),
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
}

/**
 * Compiles every tenant's policy of `config`. A `rules` engine runs the tenant's rules after the
 * engine's own. Throws `Error` naming the tenant and field when a policy names an unknown engine
 * or its rules do not compile (`parseConfig` and the admin API refuse those first).
 */
export function compileModerationPolicies(config: Pick<PlatformConfig, 'tenants' | 'moderationEngines'>, options: CompileOptions = {}): ModerationPolicies {
  const specs = new Map((config.moderationEngines ?? []).map((e) => [e.name, e]));
  const shared = new Map<string, ModerationEngine>();
  for (const spec of specs.values()) if (spec.kind === 'openai') shared.set(spec.name, buildEngine(spec, options));
  const plans = new Map<string, TenantModerationPlan>();
  for (const t of config.tenants) {
    const m = t.moderation;
    if (!m || (!m.input && !m.output)) continue;
    const rulesFor = (name: string): ModerationEngine => {
      const s = specs.get(name);
      if (name === BUILTIN_RULES_ENGINE && !s) return createRulesEngine(name, [m.rules]);
      if (!s) throw new Error(`tenant '${t.id}': moderation engine '${name}' is not declared in moderation_engines`);
      if (s.kind === 'rules') return createRulesEngine(name, [s.rules, m.rules]);
      return shared.get(name) as ModerationEngine;
    };
    const engines = new Map<string, ModerationEngine>();
    const engineOf = (name: string) => {
      let e = engines.get(name);
      if (!e) engines.set(name, (e = rulesFor(name)));
      return e;
    };
    const stage = (s: NonNullable<TenantModeration['input']>): StagePlan => ({
      engine: engineOf(s.engine),
      ...(s.blockOn !== undefined ? { blockOn: new Set(s.blockOn) } : {}),
      fail: s.fail,
      timeoutMs: s.timeoutMs,
    });
    const input = m.input ? stage(m.input) : undefined;
    const output = m.output ? { ...stage(m.output), windowChars: m.output.windowChars, overlapChars: m.output.overlapChars } : undefined;
    plans.set(tenantKey(t), { ...(input ? { input } : {}), ...(output ? { output } : {}), api: (input ?? output as StagePlan).engine });
  }
  return {
    of: (key) => plans.get(key),
    any: plans.size > 0,
    engine: (name) => shared.get(name),
  };
}

/** The key a tenant's plan is filed under: its internal id, else its slug (`tenantKeyOf`). */
export function tenantKey(t: Pick<TenantSpec, 'id' | 'uid'>): string {
  return t.uid ?? t.id;
}

/**
 * Runs one check under a stage's policy: the engine's verdict on `texts` (blocked when any text
 * is flagged in a blocking category), or — when the engine fails or exceeds `timeoutMs` — blocked
 * (`closed`) or passed (`open`). Never throws; an abort of `signal` resolves as an engine error.
 */
export async function runCheck(stage: 'input' | 'output' | 'api', plan: StagePlan, texts: string[], signal: AbortSignal, observer?: ModerationObserver, now: () => number = performance.now.bind(performance)): Promise<ModerationVerdict> {
  const started = now();
  const timeout = AbortSignal.timeout(plan.timeoutMs);
  let verdict: ModerationVerdict;
  try {
    const results = await plan.engine.check(texts, AbortSignal.any([signal, timeout]));
    const categories = new Set<string>();
    for (const r of results) {
      if (!r.flagged) continue;
      const hits = Object.keys(r.categories).filter((c) => r.categories[c] && (!plan.blockOn || plan.blockOn.has(c)));
      for (const c of hits) categories.add(c);
      // An engine that flags without naming a category blocks unless the policy lists categories.
      if (hits.length === 0 && !plan.blockOn && Object.values(r.categories).every((v) => !v)) categories.add('unspecified');
    }
    verdict = { blocked: categories.size > 0, reason: categories.size > 0 ? 'flagged' : 'pass', categories: [...categories] };
  } catch (err) {
    const reason = timeout.aborted && !signal.aborted ? 'timeout' : 'engine_error';
    // A stop of the request (its signal) is no engine failure.
    if (!signal.aborted) observer?.onFailure?.(stage, plan.engine.name, failureOf(reason, err));
    verdict = plan.fail === 'open' ? { blocked: false, reason: 'failed_open', categories: [] } : { blocked: true, reason, categories: [] };
  }
  observer?.onCheck?.(stage, plan.engine.name, now() - started, verdict);
  return verdict;
}

/** A failure's class and HTTP status (never its message). */
export function failureOf(reason: 'timeout' | 'engine_error', err: unknown): ModerationFailure {
  const status = (err as { status?: unknown } | undefined)?.status;
  return { reason, errorClass: err instanceof Error ? err.name : typeof err, ...(typeof status === 'number' ? { status } : {}) };
}

/**
 * Checks a whole answer under an output stage (a cached answer, before it is served): its text
 * in the windows the relay would check it in as it streamed ({@link windowsOf}), all in one
 * engine call. Blocked when any window is flagged (or the engine fails and the policy fails
 * closed). An empty text passes without a call. Never throws.
 */
export async function checkWholeOutput(plan: OutputPlan, text: string, signal: AbortSignal, observer?: ModerationObserver): Promise<ModerationVerdict> {
  const windows = windowsOf(text, plan.windowChars, plan.overlapChars);
  if (windows.length === 0) return { blocked: false, reason: 'pass', categories: [] };
  return runCheck('output', plan, windows, signal, observer);
}

/**
 * Problems of a tenant's policy against the engines a configuration declares, each naming its
 * field (`moderation.output.overlap_chars: ...`): unknown engines, a `rules` stage without rules,
 * overlap not below the window, rules that do not compile with RE2. Empty when it is valid.
 */
export function moderationPolicyProblems(m: TenantModeration, engines: readonly Pick<ModerationEngineSpec, 'name' | 'kind'>[], at = 'moderation'): string[] {
  const problems: string[] = [];
  const known = new Map(engines.map((e) => [e.name, e.kind]));
  const checkStage = (name: 'input' | 'output', engine: string) => {
    if (engine !== BUILTIN_RULES_ENGINE && !known.has(engine)) {
      problems.push(`${at}.${name}.engine: '${engine}' is not a moderation engine (declare it in moderation_engines, or use '${BUILTIN_RULES_ENGINE}')`);
    } else if (engine === BUILTIN_RULES_ENGINE && !known.has(engine) && !m.rules?.lists?.length && !m.rules?.patterns?.length) {
      problems.push(`${at}.${name}.engine: the '${BUILTIN_RULES_ENGINE}' engine needs ${at}.rules (lists or patterns)`);
    }
  };
  if (m.input) checkStage('input', m.input.engine);
  if (m.output) {
    checkStage('output', m.output.engine);
    if (m.output.overlapChars >= m.output.windowChars) problems.push(`${at}.output.overlap_chars: ${m.output.overlapChars} must be below window_chars (${m.output.windowChars})`);
  }
  problems.push(...rulesProblems(m.rules, `${at}.rules`));
  return problems;
}
