/**
 * The canary guard: during a rollout it compares each canary arm of every alias with the
 * stable arm over a sliding window of the usage ledger and rolls a regressing canary back
 * (through the control plane's rollback, which sets its weight to 0, writes the audit entry
 * and publishes a snapshot), then emits a `canary_rolled_back` event.
 */
import type { Kysely } from 'kysely';
import type { AliasTarget } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';
import { type ArmStats, type CanaryThresholds, DEFAULT_CANARY_THRESHOLDS, judgeCanary } from './canary-judge';
import { armStatsByRevision, NO_TRAFFIC } from './canary-stats';
import { createPgModelCatalog, type ModelCatalog, stableRevisionOf } from './model-catalog';

/** The actor the guard's rollbacks are audited as (the shape of the control plane's `Actor`). */
export const CANARY_GUARD_ACTOR: Readonly<{ id: string; label: string }> = Object.freeze({ id: 'system:canary-guard', label: 'automatic canary rollback' });

/**
 * The targets after rolling `revision` back: its weight set to 0, every other arm unchanged
 * (what the control plane's rollback commits; the arm stays listed, so raising it again is a
 * gated weight change).
 */
export function targetsAfterRollback(targets: readonly AliasTarget[], revision: string): AliasTarget[] {
  return targets.map((t) => (t.revision === revision ? { revision: t.revision, weight: 0 } : { ...t }));
}

/** Arm statistics as reported in events (`error_rate` 0–1, `p95_ttft_ms` ms or null, `n` rows). */
export interface ArmSummary {
  error_rate: number;
  p95_ttft_ms: number | null;
  n: number;
}

/** The event emitted after a canary was rolled back. */
export interface CanaryRolledBackEvent {
  type: 'canary_rolled_back';
  alias: string;
  /** The canary revision set to weight 0. */
  revision: string;
  stable_revision: string;
  trigger: 'error_rate' | 'p95_ttft';
  /** One line with the numbers, e.g. `error rate 15.0% vs stable 1.0% (+14.0% > +5.0% allowed) over 200 / 200 requests`. */
  reason: string;
  canary: ArmSummary;
  stable: ArmSummary;
  /** The window judged, ISO 8601. */
  window: { from: string; to: string };
  at: string;
}

/** Why the guard asks for a rollback (what the rollback port receives). */
export interface CanaryRollbackRequest {
  alias: string;
  revision: string;
  stable_revision: string;
  trigger: 'error_rate' | 'p95_ttft';
  reason: string;
  /** Who to write in the audit entry: {@link CANARY_GUARD_ACTOR}. */
  actor: { id: string; label: string };
  canary: ArmSummary;
  stable: ArmSummary;
}

/**
 * The rollback port: sets `request.revision`'s weight on `request.alias` to 0 and writes the
 * audit entry (actor `request.actor`, action e.g. `alias.rollback`, with `request` as the
 * detail). Resolves once committed; a rejection is logged and the canary is judged again next
 * tick.
 */
export type CanaryRollback = (alias: string, request: CanaryRollbackRequest) => Promise<void>;

/** The slice of a logger the guard uses (pino fits). */
export interface CanaryGuardLogger {
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** Options of {@link createCanaryGuard}; thresholds default to {@link DEFAULT_CANARY_THRESHOLDS}. */
export interface CanaryGuardOptions extends Partial<CanaryThresholds> {
  db: Kysely<WeirSchema>;
  /** Wall clock, epoch ms. Default `Date.now`. */
  clock?: { now(): number };
  /** The sliding window judged (ms). Default 300,000 (5 min). */
  windowMs?: number;
  rollback: CanaryRollback;
  /** Receives each `canary_rolled_back` event (publish it on NATS, log it). Errors it throws are logged. */
  onEvent?: (event: CanaryRolledBackEvent) => void | Promise<void>;
  /** Where aliases are read. Default {@link createPgModelCatalog}(db). */
  catalog?: ModelCatalog;
  logger?: CanaryGuardLogger;
}

/** What one check concluded for one canary arm. */
export interface CanaryCheck {
  alias: string;
  revision: string;
  stable_revision: string;
  canary: ArmStats;
  stable: ArmStats;
  outcome: 'healthy' | 'not_enough_traffic' | 'rolled_back' | 'rollback_failed';
  reason?: string;
}

/** A running guard. */
export interface CanaryGuard {
  /** Judges every canary arm of every alias once, rolling back the regressing ones. Checks never overlap: a call during a check waits for it and returns its result. */
  check(): Promise<CanaryCheck[]>;
  /** Checks every `intervalMs` (default 15,000) until {@link stop}; the timer does not keep the process alive. */
  start(intervalMs?: number): void;
  /** Stops the timer and waits for a running check. */
  stop(): Promise<void>;
}

function summary(stats: ArmStats): ArmSummary {
  return { error_rate: stats.error_rate, p95_ttft_ms: stats.p95_ttft_ms, n: stats.n };
}

/**
 * Creates the canary guard. Each check reads every alias; an alias with one arm (or no
 * positive weight) is skipped; its stable arm is the largest weight, every other arm with a
 * positive weight is a canary and is judged by {@link judgeCanary} on the ledger rows of the
 * last `windowMs`. A rolled-back canary is judged afterwards only on rows that finished after
 * its rollback, so raising it again (after a new passing eval) starts from a clean window —
 * kept in memory: a restarted guard judges the whole window.
 */
export function createCanaryGuard(options: CanaryGuardOptions): CanaryGuard {
  const { db, rollback, logger } = options;
  const clock = options.clock ?? { now: () => Date.now() };
  const windowMs = options.windowMs ?? 5 * 60_000;
  const thresholds: CanaryThresholds = {
    minRequests: options.minRequests ?? DEFAULT_CANARY_THRESHOLDS.minRequests,
    errorRateDelta: options.errorRateDelta ?? DEFAULT_CANARY_THRESHOLDS.errorRateDelta,
    p95TtftRatio: options.p95TtftRatio ?? DEFAULT_CANARY_THRESHOLDS.p95TtftRatio,
  };
  const catalog = options.catalog ?? createPgModelCatalog(db);
  const rolledBackAt = new Map<string, number>();
  let running: Promise<CanaryCheck[]> | undefined;
  let timer: NodeJS.Timeout | undefined;

  const checkOnce = async (): Promise<CanaryCheck[]> => {
    const checks: CanaryCheck[] = [];
    for (const alias of await catalog.listAliases()) {
      const stableRevision = stableRevisionOf(alias.targets);
      const canaries = alias.targets.filter((t) => t.weight > 0 && t.revision !== stableRevision);
      if (!stableRevision || canaries.length === 0) continue;
      const nowMs = clock.now();
      const to = new Date(nowMs);
      const from = new Date(nowMs - windowMs);
      const byRevision = await armStatsByRevision(db, alias.name, from, to);
      const stable = byRevision.get(stableRevision) ?? NO_TRAFFIC;
      for (const arm of canaries) {
        const key = `${alias.name}\u0000${arm.revision}`;
        const since = rolledBackAt.get(key);
        const canary = since !== undefined && since > from.getTime() ? ((await armStatsByRevision(db, alias.name, new Date(since), to)).get(arm.revision) ?? NO_TRAFFIC) : (byRevision.get(arm.revision) ?? NO_TRAFFIC);
        const base = { alias: alias.name, revision: arm.revision, stable_revision: stableRevision, canary, stable };
        const verdict = judgeCanary(canary, stable, thresholds);
        if (verdict.action === 'keep') {
          checks.push({ ...base, outcome: verdict.why });
          continue;
        }
        const request: CanaryRollbackRequest = {
          alias: alias.name,
          revision: arm.revision,
          stable_revision: stableRevision,
          trigger: verdict.trigger,
          reason: verdict.reason,
          actor: { ...CANARY_GUARD_ACTOR },
          canary: summary(canary),
          stable: summary(stable),
        };
        try {
          await rollback(alias.name, request);
        } catch (err) {
          logger?.error({ err, alias: alias.name, revision: arm.revision }, 'canary rollback failed; retrying on the next check');
          checks.push({ ...base, outcome: 'rollback_failed', reason: verdict.reason });
          continue;
        }
        rolledBackAt.set(key, nowMs);
        checks.push({ ...base, outcome: 'rolled_back', reason: verdict.reason });
        const event: CanaryRolledBackEvent = {
          type: 'canary_rolled_back',
          alias: alias.name,
          revision: arm.revision,
          stable_revision: stableRevision,
          trigger: verdict.trigger,
          reason: verdict.reason,
          canary: request.canary,
          stable: request.stable,
          window: { from: from.toISOString(), to: to.toISOString() },
          at: to.toISOString(),
        };
        logger?.warn({ alias: alias.name, revision: arm.revision, trigger: verdict.trigger, reason: verdict.reason }, 'canary rolled back');
        try {
          await options.onEvent?.(event);
        } catch (err) {
          logger?.error({ err, alias: alias.name, revision: arm.revision }, 'canary_rolled_back event handler failed');
        }
      }
    }
    return checks;
  };

  const check = (): Promise<CanaryCheck[]> => {
    running ??= checkOnce().finally(() => {
      running = undefined;
    });
    return running;
  };

  return {
    check,
    start(intervalMs = 15_000) {
      if (timer) return;
      timer = setInterval(() => {
        check().catch((err: unknown) => logger?.error({ err }, 'canary guard check failed'));
      }, intervalMs);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
      await running?.catch(() => undefined);
    },
  };
}
