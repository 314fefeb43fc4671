/**
 * One reconciliation run (`npm run reconcile`): settle uncertain ledger rows from the engines'
 * own counts, reconcile reservations with the ledger, then compare the ledger over a window
 * with the usage stream, the engines' counters and tokens × prices (`@weir/ledger`
 * `reconcileUsage`).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { RevisionPricing, TenantSpec } from '@weir/core';
import { type EngineComparison, type EngineCounterSample, formatUsd, reconcileUsage, type UsageReconciliation } from '@weir/ledger';
import type { ReconcileQueries } from '@weir/store-pg';
import { fetchEngineCounters } from './engine-client';
import { type EngineEndpoint, settleUncertainUsage, type SettleUncertainResult } from './settle-uncertain';
import { budgetOverruns } from './budget-check';
import { readUsageStream, type UsageStreamRead } from './usage-stream-reader';

/**
 * How the engines' counters take part: `off` (not read), `report` (read and shown, never a
 * difference: a counter covers everything since its replica started, so it matches the
 * ledger's window only when every replica started fresh for it), `assert` (a mismatch, or an
 * unreachable engine, is a difference).
 */
export type EngineCounterMode = 'off' | 'report' | 'assert';

/** Options of {@link runReconciliation}. */
export interface RunReconciliationOptions {
  /** The configured tenants: when given, every budget row is checked against its budget. */
  tenants?: readonly TenantSpec[];
  /** Window over `finished_at`: `since ≤ t < until`. `since` default: everything; `until` default: now. */
  since?: Date;
  until?: Date;
  /** Prices by revision id. */
  pricing: ReadonlyMap<string, RevisionPricing>;
  /** The configuration's replicas per revision (for settling uncertain rows and for counters). */
  enginesByRevision: ReadonlyMap<string, readonly EngineEndpoint[]>;
  /**
   * Engines given explicitly (`--engines`): asked about uncertain rows of any revision, and,
   * when given, the only engines whose counters are read. Default none.
   */
  engines?: readonly EngineEndpoint[];
  /** Default `report`. */
  engineCounters?: EngineCounterMode;
  /** Write fixes (settle uncertain rows, reconcile reservations). Default false: report only. */
  fix?: boolean;
  /** The usage stream to compare with (`natsNames(ns).usageStream`); omit to skip the stream. */
  usageStream?: string;
  /** See {@link readUsageStream}. Default 600,000. */
  streamSlackMs?: number;
}

/** Dependencies of {@link runReconciliation}. */
export interface RunReconciliationDeps {
  queries: ReconcileQueries;
  /** Needed when `usageStream` is set. */
  nats?: NatsConnection;
  /**
   * Admission's reservation reconciliation (expires held reservations past their expiry,
   * settles them from the ledger or releases them, corrects settled amounts that differ from
   * the ledger); run after uncertain rows are settled, only with `fix`. Omit to skip.
   */
  reconcileReservations?: () => Promise<unknown>;
  /** Counts the reservations still held whose expiry has passed, after reservation reconciliation. */
  countExpiredHeld?: (now: Date) => Promise<number>;
  /** Wall clock (default `Date.now`). */
  now?: () => number;
  /** Reads an engine's counters (default {@link fetchEngineCounters}). */
  fetchCounters?: (baseUrl: string) => Promise<EngineCounterSample[]>;
  /** Passed to the uncertain-row settlement (tests). */
  lookup?: Parameters<typeof settleUncertainUsage>[1]['lookup'];
}

/** The whole run's outcome. */
export interface ReconciliationReport {
  /** True when every comparison agrees (and, with `fix`, nothing failed). Exit code 0. */
  ok: boolean;
  window: { since: string | null; until: string };
  fix: boolean;
  uncertain: SettleUncertainResult;
  reservations: { ran: boolean; result?: unknown; error?: string; expiredHeld?: number };
  stream: Omit<UsageStreamRead, 'records'> & { read: boolean; error?: string };
  engineCounters: { mode: EngineCounterMode; comparisons: EngineComparison[]; errors: { engine: string; error: string }[] };
  usage: UsageReconciliation;
  /** Lines that make `ok` false. */
  differences: string[];
  /** Things to know that are not differences (uncertain rows no engine knows, engine counters in `report` mode, …). */
  notes: string[];
}

/**
 * Runs the steps in order: (1) settle uncertain rows in the window from the engines' own
 * count (written only with `fix`; the comparison then sees the settled rows); (2) with `fix`,
 * `reconcileReservations`; (3) read the ledger's window, the usage stream's records of the
 * window, and the engines' counters, and compare them with `reconcileUsage`.
 * @throws the database's or NATS's error when they fail (an unreachable engine is reported,
 *   not thrown).
 */
export async function runReconciliation(options: RunReconciliationOptions, deps: RunReconciliationDeps): Promise<ReconciliationReport> {
  const now = deps.now ?? Date.now;
  const until = options.until ?? new Date(now());
  const window = { ...(options.since ? { since: options.since } : {}), until };
  const fix = options.fix ?? false;
  const mode = options.engineCounters ?? 'report';
  const differences: string[] = [];
  const notes: string[] = [];

  // 1. Uncertain rows.
  const uncertain = await settleUncertainUsage(
    { window, pricing: options.pricing, enginesByRevision: options.enginesByRevision, extraEngines: options.engines, fix },
    { queries: deps.queries, lookup: deps.lookup },
  );
  if (!fix && uncertain.settled.length > 0) notes.push(`${uncertain.settled.length} uncertain row(s) can be settled from an engine's count: run with --fix`);
  for (const u of uncertain.unresolved) notes.push(`uncertain row ${u.generationId} (${u.modelRevision}) stays uncertain: ${u.reason}`);

  // 2. Reservations.
  const reservations: ReconciliationReport['reservations'] = { ran: false };
  if (fix && deps.reconcileReservations) {
    try {
      reservations.result = await deps.reconcileReservations();
      reservations.ran = true;
    } catch (error) {
      reservations.error = (error as Error).message;
      differences.push(`reservation reconciliation failed: ${reservations.error}`);
    }
  } else if (!deps.reconcileReservations) {
    notes.push('reservations were not reconciled (no admission store configured)');
  }
  if (deps.countExpiredHeld) {
    reservations.expiredHeld = await deps.countExpiredHeld(new Date(now()));
    if (reservations.expiredHeld > 0) {
      (fix ? differences : notes).push(`${reservations.expiredHeld} reservation(s) still held past their expiry`);
    }
  }

  // Budgets: settled + reserved ≤ budget for every configured budget (a settlement raised by
  // step 1 or 2 must not hide an overrun), and reservations that expired with no usage record
  // (their gateway stopped mid-generation: what it produced is not billed).
  if (options.tenants) differences.push(...budgetOverruns(await deps.queries.budgetRows(), options.tenants));
  const unrecorded = await deps.queries.listExpiredWithoutUsage(window);
  if (unrecorded.length > 0) {
    notes.push(
      `${unrecorded.length} reservation(s) expired with no usage record (their gateway stopped before the generation's usage was recorded; tokens it produced are not billed): ${unrecorded.slice(0, 10).join(', ')}${unrecorded.length > 10 ? ', …' : ''}`,
    );
  }

  // 3. Compare.
  const ledger = await deps.queries.ledgerRows(window);
  let streamRead: UsageStreamRead | undefined;
  const stream: ReconciliationReport['stream'] = { read: false, messages: 0, duplicates: 0, differingDuplicates: 0, malformed: 0, firstMessageAt: null, coversWindow: false };
  if (options.usageStream) {
    if (!deps.nats) throw new Error('a NATS connection is needed to read the usage stream');
    streamRead = await readUsageStream(deps.nats, { stream: options.usageStream, since: options.since, until, slackMs: options.streamSlackMs });
    const { records: _records, ...rest } = streamRead;
    Object.assign(stream, rest, { read: true });
    if (!streamRead.coversWindow) notes.push('the usage stream no longer holds the start of the window (aged out): the stream comparison is skipped');
    if (streamRead.malformed > 0) differences.push(`${streamRead.malformed} malformed message(s) in the usage stream`);
    if (streamRead.differingDuplicates > 0) notes.push(`${streamRead.differingDuplicates} generation(s) have later usage records that differ from the first (dropped, as the ledger drops them)`);
  }

  const samples: EngineCounterSample[] = [];
  const engineErrors: { engine: string; error: string }[] = [];
  if (mode !== 'off') {
    const read = deps.fetchCounters ?? ((url: string) => fetchEngineCounters(url));
    const targets = options.engines && options.engines.length > 0 ? options.engines : [...options.enginesByRevision.values()].flat();
    for (const e of targets) {
      try {
        samples.push(...(await read(e.baseUrl)));
      } catch (error) {
        engineErrors.push({ engine: e.replicaId, error: (error as Error).message });
      }
    }
    for (const e of engineErrors) (mode === 'assert' ? differences : notes).push(`engine ${e.engine}: counters unreadable (${e.error})`);
  }

  const useStream = streamRead && streamRead.coversWindow ? streamRead.records : undefined;
  const usage = reconcileUsage({ ledger, stream: useStream, engines: mode === 'assert' ? samples : undefined, pricing: options.pricing });
  let comparisons = usage.engines ?? [];
  if (mode === 'report' && samples.length > 0) {
    comparisons = reconcileUsage({ ledger, engines: samples, pricing: options.pricing }).engines ?? [];
    for (const c of comparisons.filter((x) => !x.ok)) {
      notes.push(`revision ${c.revisionId}: engines counted ${c.engine.inputTokens} / ${c.engine.outputTokens} input/output tokens since they started, the ledger's window ${c.ledger.inputTokens} / ${c.ledger.outputTokens} (comparable only for engines started fresh for the window: --engines-fresh)`);
    }
  }
  differences.push(...usage.differences);

  return {
    ok: differences.length === 0,
    window: { since: options.since?.toISOString() ?? null, until: until.toISOString() },
    fix,
    uncertain,
    reservations,
    stream,
    engineCounters: { mode, comparisons, errors: engineErrors },
    usage,
    differences,
    notes,
  };
}

const usd = (nano: number): string => `$${formatUsd(nano).toFixed(9)}`;

/** The report as text for a terminal: window, each step, the sums per (tenant, revision), then the verdict. */
export function formatReport(r: ReconciliationReport): string {
  const lines: string[] = [];
  lines.push(`Weir reconciliation — window ${r.window.since ?? 'beginning'} … ${r.window.until}${r.fix ? ' (fix)' : ' (report only)'}`);
  lines.push('');
  lines.push(`Uncertain rows: ${r.uncertain.found} found, ${r.uncertain.settled.length} ${r.fix ? 'settled' : 'settleable'}, ${r.uncertain.unresolved.length} unresolved`);
  for (const s of r.uncertain.settled) {
    lines.push(`  ${s.generationId} (${s.modelRevision}) from ${s.source}: ${s.before.inputTokens}+${s.before.outputTokens} → ${s.after.inputTokens}+${s.after.outputTokens} tokens, ${usd(s.before.costNanoUsd)} → ${usd(s.after.costNanoUsd)}`);
  }
  lines.push(`Reservations: ${r.reservations.ran ? `reconciled ${JSON.stringify(r.reservations.result)}` : r.reservations.error ? `failed: ${r.reservations.error}` : 'not reconciled'}${r.reservations.expiredHeld !== undefined ? `; held past expiry: ${r.reservations.expiredHeld}` : ''}`);
  lines.push('');
  lines.push('Ledger by tenant and revision (records, input, output, cached tokens, cost):');
  for (const g of r.usage.ledger) lines.push(`  ${g.tenantId}  ${g.modelRevision}  ${g.records}  ${g.inputTokens}  ${g.outputTokens}  ${g.cachedInputTokens}  ${usd(g.costNanoUsd)}`);
  const t = r.usage.ledgerTotals;
  lines.push(`  total  ${t.records} records  ${t.inputTokens} in  ${t.outputTokens} out  ${t.cachedInputTokens} cached  ${usd(t.costNanoUsd)}`);
  lines.push(`Cost = tokens × prices: ${r.usage.cost.ok ? 'exact' : `${r.usage.cost.mismatches.count} row(s) differ`} (recomputed ${usd(r.usage.cost.expectedNanoUsd)})`);
  if (!r.stream.read) lines.push('Usage stream: not read');
  else if (!r.usage.stream) lines.push(`Usage stream: ${r.stream.messages} messages read; not compared (window not covered)`);
  else {
    const s = r.usage.stream;
    lines.push(`Usage stream: ${s.totals.records} records (${r.stream.messages} messages, ${r.stream.duplicates} duplicates dropped), ${s.totals.inputTokens} in, ${s.totals.outputTokens} out, ${usd(s.totals.costNanoUsd)}: ${s.ok ? 'equal to the ledger' : 'DIFFERS'}`);
  }
  if (r.engineCounters.mode === 'off') lines.push('Engine counters: not read');
  for (const c of r.engineCounters.comparisons) {
    lines.push(`Engine counters ${c.revisionId} (${c.replicas.join(', ')}): ${c.engine.inputTokens} in, ${c.engine.outputTokens} out; ledger ${c.ledger.inputTokens} in, ${c.ledger.outputTokens} out: ${c.ok ? 'equal' : r.engineCounters.mode === 'assert' ? 'DIFFER' : 'differ (not fresh engines?)'}`);
  }
  if (r.notes.length > 0) {
    lines.push('');
    lines.push('Notes:');
    for (const n of r.notes) lines.push(`  - ${n}`);
  }
  lines.push('');
  if (r.ok) lines.push('OK: the ledger agrees with every independent count.');
  else {
    lines.push(`DIFFERENCES (${r.differences.length}):`);
    for (const d of r.differences) lines.push(`  - ${d}`);
  }
  return lines.join('\n');
}
