/**
 * One reconciliation run (`npm run reconcile`, docs/reconciliation.md): recover the settlement
 * journal of a stopped all-in-one, settle estimated and uncertain ledger rows from the engines'
 * own counts, release or settle every hold past expiry (leases, and the reservations of
 * databases from before leases), check the budget invariants, then compare the ledger over a
 * window with the usage stream, the engines' counters and tokens × prices
 * (`@weir/ledger` `reconcileUsage`).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { LeaseStore, ReclaimReport } from '@weir/admission';
import type { OverspendEvent, TenantSpec } from '@weir/core';
import { type EngineComparison, type EngineCounterSample, formatUsd, reconcileUsage, type UsageReconciliation } from '@weir/ledger';
import type { JournalRecovery, LeasedMismatch, OrphanReport, ReconcileQueries, SettlementJournalInspection } from '@weir/store-pg';
import { budgetOverruns } from './budget-check';
import { fetchEngineCounters } from './engine-client';
import { checkHolds, type HoldsCheck } from './holds-check';
import { type PriceLookup, priceOf } from './price-book';
import { type EngineEndpoint, settleFromEngines, type SettleFromEnginesResult } from './settle-from-engines';
import { readUsageStream, type UsageStreamRead } from './usage-stream-reader';

/**
 * How the engines' counters take part: `off` (not read), `report` (read and shown, never a
 * difference: a counter covers everything since its replica started, so it matches the
 * ledger's window only when every replica started fresh for it), `assert` (a mismatch, or an
 * unreachable engine, is a difference).
 */
export type EngineCounterMode = 'off' | 'report' | 'assert';

/** ADR 0002: a lease is reclaimed once its `hold_until_ms` + this has passed (clock skew between holders). */
export const LEASE_RECLAIM_GRACE_MS = 5_000;
/** Live holders reclaim lapsed leases, and the admission service expired reservations, this often (ms). */
export const RECLAIM_INTERVAL_MS = 10_000;

/** Options of {@link runReconciliation}. */
export interface RunReconciliationOptions {
  /** The configured tenants: when given, every budget row is checked against its budget. */
  tenants?: readonly TenantSpec[];
  /** Window over `finished_at`: `since ≤ t < until`. `since` default: everything; `until` default: now. */
  since?: Date;
  until?: Date;
  /**
   * Prices: a price book (each row at the prices of the configuration snapshot current when it
   * finished; `loadReconcileConfig`) or one map for every time.
   */
  pricing: PriceLookup;
  /** The configuration's replicas per revision (for settling estimated rows and for counters). */
  enginesByRevision: ReadonlyMap<string, readonly EngineEndpoint[]>;
  /**
   * Engines given explicitly (`--engines`): asked about estimated rows of any revision, and,
   * when given, the only engines whose counters are read. Default none.
   */
  engines?: readonly EngineEndpoint[];
  /** Default `report`. */
  engineCounters?: EngineCounterMode;
  /** Write fixes. Default false: report only (and say what `--fix` would do). */
  fix?: boolean;
  /** The usage stream to compare with (`natsNames(ns).usageStream`); omit to skip the stream. */
  usageStream?: string;
  /** See {@link readUsageStream}. Default 600,000. */
  streamSlackMs?: number;
  /**
   * Every holder of the database is provably stopped: reconciliation holds the data directory's
   * lock of the all-in-one that owns it (its embedded database). Everything still held is then
   * orphaned, whatever its expiry, and `--fix` reclaims it all, as the next start would.
   */
  ownerStopped?: boolean;
  /** Lease grace (ms). Default {@link LEASE_RECLAIM_GRACE_MS}. */
  leaseGraceMs?: number;
  /** How long a hold may stay lapsed on a running deployment before a report-only run calls it a fault (ms). Default {@link RECLAIM_INTERVAL_MS}. */
  reclaimSlackMs?: number;
  /** Where the configuration came from (shown in the report). */
  configSource?: string;
}

/** The settlement journal of a stopped all-in-one (its data directory is locked by this run). */
export interface ReconcileJournal {
  /** What recovery would do, without writing. */
  inspect(): Promise<SettlementJournalInspection>;
  /**
   * Opens the journal, which recovers it (applies what is unapplied, settles abandoned
   * generations), and closes it. Undefined when there is no journal directory.
   */
  recover(): Promise<JournalRecoveryOutcome | undefined>;
}

/** What {@link ReconcileJournal.recover} did. */
export interface JournalRecoveryOutcome {
  recovery: JournalRecovery;
  /** Settlements whose leases no longer held them (settled anyway). */
  overspends: OverspendEvent[];
  /** Settlements the database refused even item by item (kept in `rejected.journal`). */
  rejected: number;
  /** Settlements left unapplied at close (0 unless the database failed). */
  unapplied: number;
}

/** Dependencies of {@link runReconciliation}. */
export interface RunReconciliationDeps {
  queries: ReconcileQueries;
  /** Needed when `usageStream` is set. */
  nats?: NatsConnection;
  /** The stopped all-in-one's settlement journal (first step). Omit where there is none (the split; Postgres). */
  journal?: ReconcileJournal;
  /**
   * Frees what a stopped owner left running (`expireOrphans`: running idempotency keys, held
   * reservations); only with `fix` and `ownerStopped`, after the journal's recovery (which
   * writes the keys it knows as interrupted first).
   */
  expireOrphans?: () => Promise<OrphanReport>;
  /**
   * Reservation reconciliation of ADR 0001 (`createAdmission(…).reconcileReservations()`):
   * held reservations past their expiry are settled from their ledger row or released; settled
   * amounts that differ from the ledger are corrected. Run with `fix` after estimated rows are
   * settled. Omit to skip.
   */
  reconcileReservations?: () => Promise<unknown>;
  /** The lease store: with `fix`, reclaims lapsed leases (every lease when `ownerStopped`). */
  leaseStore?: Pick<LeaseStore, 'reclaimExpired' | 'reclaimHolders'>;
  /** Wall clock (default `Date.now`). */
  now?: () => number;
  /** Reads an engine's counters (default {@link fetchEngineCounters}). */
  fetchCounters?: (baseUrl: string) => Promise<EngineCounterSample[]>;
  /** Passed to the estimated-row settlement (tests). */
  lookup?: Parameters<typeof settleFromEngines>[1]['lookup'];
}

/** The whole run's outcome. */
export interface ReconciliationReport {
  /** True when every check agrees (and, with `fix`, nothing failed). Exit code 0. */
  ok: boolean;
  window: { since: string | null; until: string };
  fix: boolean;
  /** Where prices and budgets came from. */
  config?: string;
  /** The stopped all-in-one's settlement journal: what recovery would do (report only) or did (`fix`). */
  journal?: { inspection?: SettlementJournalInspection; recovered?: JournalRecoveryOutcome; error?: string };
  /** What `expireOrphans` freed (`fix` on a stopped all-in-one). */
  orphans?: OrphanReport;
  /** Estimated and uncertain rows (the name is kept for readers of earlier reports). */
  uncertain: SettleFromEnginesResult;
  reservations: { ran: boolean; result?: unknown; error?: string; held?: number; expiredHeld?: number };
  leases: { reclaimed?: ReclaimReport; error?: string; mismatches: LeasedMismatch[] } & HoldsCheck['leases'];
  budgets: { rows: number; overruns: string[] };
  stream: Omit<UsageStreamRead, 'records'> & { read: boolean; error?: string };
  engineCounters: { mode: EngineCounterMode; comparisons: EngineComparison[]; errors: { engine: string; error: string }[] };
  usage: UsageReconciliation;
  /** Lines that make `ok` false. */
  differences: string[];
  /** Things to know that are not differences. */
  notes: string[];
}

const usd = (nano: number): string => `$${formatUsd(nano).toFixed(9)}`;

/**
 * Runs the steps in order:
 * 0. the journal (with `deps.journal`): with `fix`, recover it; else inspect it — settlements
 *    not applied and generations abandoned mid-stream are differences;
 * 1. with `fix` and `ownerStopped`: `expireOrphans`;
 * 2. estimated and uncertain rows in the window, settled from the engines' own counts
 *    (written only with `fix`);
 * 3. with `fix`: `reconcileReservations`;
 * 4. with `fix`: reclaim leases — every lease when `ownerStopped`, else those past
 *    `hold_until_ms` + grace;
 * 5. the holds (`checkHolds`), `leased_nano` = Σ (granted − consumed) of each row's leases, and
 *    settled + reserved + leased ≤ budget for every configured budget;
 * 6. the ledger's window against the usage stream, the engines' counters and tokens × prices.
 * @throws the database's or NATS's error when they fail (an unreachable engine is reported,
 *   not thrown).
 */
export async function runReconciliation(options: RunReconciliationOptions, deps: RunReconciliationDeps): Promise<ReconciliationReport> {
  const now = deps.now ?? Date.now;
  const until = options.until ?? new Date(now());
  const window = { ...(options.since ? { since: options.since } : {}), until };
  const fix = options.fix ?? false;
  const ownerStopped = options.ownerStopped ?? false;
  const mode = options.engineCounters ?? 'report';
  const graceMs = options.leaseGraceMs ?? LEASE_RECLAIM_GRACE_MS;
  const slackMs = fix ? 0 : (options.reclaimSlackMs ?? RECLAIM_INTERVAL_MS);
  const differences: string[] = [];
  const notes: string[] = [];

  // 0. The journal of a stopped all-in-one.
  let journal: ReconciliationReport['journal'];
  if (deps.journal) {
    journal = {};
    if (fix) {
      try {
        journal.recovered = await deps.journal.recover();
        const r = journal.recovered;
        if (r) {
          const { replayed, estimated, interrupted } = r.recovery;
          if (replayed + estimated + interrupted > 0) {
            notes.push(`settlement journal recovered: ${replayed} settlement(s) applied, ${estimated} abandoned generation(s) billed as estimated, ${interrupted} abandoned before any output (key marked interrupted)`);
          }
          if (r.recovery.invalidLines > 0 || r.recovery.tornBytes > 0) notes.push(`settlement journal: ${r.recovery.invalidLines} invalid line(s) and ${r.recovery.tornBytes} torn byte(s) skipped`);
          if (r.overspends.length > 0) notes.push(`${r.overspends.length} recovered settlement(s) exceeded what their leases held: ${usd(r.overspends.reduce((n, o) => n + o.excessNano, 0))} settled beyond the leases`);
          if (r.rejected > 0) differences.push(`${r.rejected} journal settlement(s) refused by the database (kept in rejected.journal)`);
          if (r.unapplied > 0) differences.push(`${r.unapplied} journal settlement(s) still not applied after recovery`);
        }
      } catch (error) {
        journal.error = (error as Error).message;
        differences.push(`settlement journal recovery failed: ${journal.error}`);
      }
    } else {
      const i = await deps.journal.inspect();
      journal.inspection = i;
      const pending = i.unapplied.settlements + i.unapplied.interruptions;
      const abandoned = i.abandoned.estimated + i.abandoned.interrupted;
      if (pending > 0) {
        differences.push(
          `the settlement journal holds ${i.unapplied.settlements} settlement(s) and ${i.unapplied.interruptions} interruption(s) not yet applied to the ledger (${i.unapplied.generationIds.slice(0, 5).join(', ')}${pending > 5 ? ', …' : ''}): --fix applies them, as the next start would`,
        );
      }
      if (abandoned > 0) {
        differences.push(
          `the settlement journal holds ${abandoned} generation(s) abandoned mid-stream (${i.abandoned.generationIds.slice(0, 5).join(', ')}${abandoned > 5 ? ', …' : ''}): --fix bills ${i.abandoned.estimated} from their last progress as estimated (${i.abandoned.interrupted} had produced nothing) and marks ${i.abandoned.keys} idempotency key(s) interrupted, as the next start would`,
        );
      }
      if (i.invalidLines > 0 || i.tornBytes > 0) notes.push(`settlement journal: ${i.invalidLines} invalid line(s) and ${i.tornBytes} torn byte(s) (skipped by recovery)`);
    }
  }

  // 1. What a stopped owner left running.
  let orphans: OrphanReport | undefined;
  if (fix && ownerStopped && deps.expireOrphans) {
    orphans = await deps.expireOrphans();
    if (orphans.claimsFreed + orphans.reservationsExpired > 0) notes.push(`the stopped all-in-one left ${orphans.claimsFreed} running key(s) (freed) and ${orphans.reservationsExpired} held reservation(s) (expired now, then reconciled)`);
  }

  // 2. Estimated and uncertain rows.
  const uncertain = await settleFromEngines(
    { window, pricing: options.pricing, enginesByRevision: options.enginesByRevision, extraEngines: options.engines, fix },
    { queries: deps.queries, lookup: deps.lookup },
  );
  if (!fix && uncertain.settled.length > 0) notes.push(`${uncertain.settled.length} estimated or uncertain row(s) can be settled from an engine's count: run with --fix`);
  const overspent = uncertain.settled.flatMap((s) => s.overspends ?? []);
  if (overspent.length > 0) notes.push(`${overspent.length} settled correction(s) exceeded what their leases held: ${usd(overspent.reduce((n, o) => n + o.excessNano, 0))} settled beyond the leases`);
  const byReason = new Map<string, string[]>();
  for (const u of uncertain.unresolved) byReason.set(u.reason, [...(byReason.get(u.reason) ?? []), `${u.generationId} (${u.modelRevision})`]);
  for (const [reason, ids] of byReason) notes.push(`${ids.length} estimated or uncertain row(s) stay as recorded — ${reason}: ${ids.slice(0, 5).join(', ')}${ids.length > 5 ? ', …' : ''}`);

  // One instant for the fixes and the checks after them: whatever had lapsed by then was fixed,
  // so what the checks still find lapsed by then is a fault (not something that lapsed since).
  const fixedAtMs = now();

  // 3. Reservations (ADR 0001's table: databases from before leases, and the split until it moves).
  const reservations: ReconciliationReport['reservations'] = { ran: false };
  if (fix && deps.reconcileReservations) {
    try {
      reservations.result = await deps.reconcileReservations();
      reservations.ran = true;
    } catch (error) {
      reservations.error = (error as Error).message;
      differences.push(`reservation reconciliation failed: ${reservations.error}`);
    }
  }

  // 4. Leases.
  let reclaimed: ReclaimReport | undefined;
  let leaseError: string | undefined;
  if (fix && deps.leaseStore) {
    try {
      reclaimed = ownerStopped ? await deps.leaseStore.reclaimHolders({ nowMs: fixedAtMs }) : await deps.leaseStore.reclaimExpired({ nowMs: fixedAtMs, graceMs });
      if (reclaimed.leases + reclaimed.holders > 0) notes.push(`reclaimed ${reclaimed.leases} lease(s) of ${reclaimed.holders} holder(s), giving ${usd(reclaimed.returnedNano)} back to their budgets`);
    } catch (error) {
      leaseError = (error as Error).message;
      differences.push(`lease reclaim failed: ${leaseError}`);
    }
  }

  // 5. Holds and budgets.
  const nowMs = fix ? fixedAtMs : now();
  const held = await deps.queries.heldReservations(new Date(nowMs - slackMs));
  reservations.held = held.held;
  reservations.expiredHeld = held.pastExpiry;
  const holds = checkHolds({
    nowMs,
    ownerStopped,
    fixed: fix,
    graceMs,
    slackMs,
    leases: await deps.queries.leases(),
    reservations: held,
    runningKeys: ownerStopped ? await deps.queries.countRunningKeys() : undefined,
  });
  differences.push(...holds.differences);
  notes.push(...holds.notes);
  const mismatches = await deps.queries.leasedMismatches();
  for (const m of mismatches) {
    differences.push(`${m.scope} ${m.period} from ${m.startsOn}: leased ${m.leasedNano} nano-USD, but its ${m.leases} budget lease(s) hold ${m.leasesHoldNano}`);
  }
  const budgetRows = await deps.queries.budgetRows();
  const overruns = options.tenants ? budgetOverruns(budgetRows, options.tenants) : [];
  differences.push(...overruns);
  // Reservations that expired with no usage record: their gateway stopped mid-generation, and
  // with it the only count of what it produced.
  const unrecorded = await deps.queries.listExpiredWithoutUsage(window);
  if (unrecorded.length > 0) {
    notes.push(
      `${unrecorded.length} reservation(s) expired with no usage record (their gateway stopped before the generation's usage was recorded; tokens it produced are not billed): ${unrecorded.slice(0, 10).join(', ')}${unrecorded.length > 10 ? ', …' : ''}`,
    );
  }

  // 6. Compare.
  const ledger = await deps.queries.ledgerRows(window);
  let streamRead: UsageStreamRead | undefined;
  const stream: ReconciliationReport['stream'] = { read: false, messages: 0, duplicates: 0, differingDuplicates: 0, malformed: 0, interruptions: 0, firstMessageAt: null, coversWindow: false };
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

  const priceRow = (row: { modelRevision: string; finishedAt?: Date }) => priceOf(options.pricing, row.modelRevision, row.finishedAt);
  const pricing = new Map<string, never>();
  const useStream = streamRead && streamRead.coversWindow ? streamRead.records : undefined;
  const usage = reconcileUsage({ ledger, stream: useStream, engines: mode === 'assert' ? samples : undefined, pricing, priceOf: priceRow });
  let comparisons = usage.engines ?? [];
  if (mode === 'report' && samples.length > 0) {
    comparisons = reconcileUsage({ ledger, engines: samples, pricing, priceOf: priceRow }).engines ?? [];
    for (const c of comparisons.filter((x) => !x.ok)) {
      notes.push(`revision ${c.revisionId}: engines counted ${c.engine.inputTokens} / ${c.engine.outputTokens} input/output tokens since they started, the ledger's window ${c.ledger.inputTokens} / ${c.ledger.outputTokens} (comparable only for engines started fresh for the window: --engines-fresh)`);
    }
  }
  if (usage.cost.capped > 0) notes.push(`${usage.cost.capped} estimated row(s) cost less than tokens × prices: billed at most their reservation's worst case`);
  differences.push(...usage.differences);

  return {
    ok: differences.length === 0,
    window: { since: options.since?.toISOString() ?? null, until: until.toISOString() },
    fix,
    ...(options.configSource ? { config: options.configSource } : {}),
    ...(journal ? { journal } : {}),
    ...(orphans ? { orphans } : {}),
    uncertain,
    reservations,
    leases: { ...(reclaimed ? { reclaimed } : {}), ...(leaseError ? { error: leaseError } : {}), mismatches, ...holds.leases },
    budgets: { rows: budgetRows.length, overruns },
    stream,
    engineCounters: { mode, comparisons, errors: engineErrors },
    usage,
    differences,
    notes,
  };
}

/** The report as text for a terminal: window, each step, the sums per (tenant, revision), then the verdict. */
export function formatReport(r: ReconciliationReport): string {
  const lines: string[] = [];
  lines.push(`Weir reconciliation — window ${r.window.since ?? 'beginning'} … ${r.window.until}${r.fix ? ' (fix)' : ' (report only)'}`);
  if (r.config) lines.push(`Configuration: ${r.config}`);
  lines.push('');
  if (r.journal?.inspection) {
    const i = r.journal.inspection;
    lines.push(
      i.present
        ? `Settlement journal: ${i.segments} segment(s); ${i.unapplied.settlements + i.unapplied.interruptions} not applied, ${i.abandoned.estimated + i.abandoned.interrupted} abandoned generation(s)`
        : 'Settlement journal: none',
    );
  }
  if (r.journal && !r.journal.inspection) {
    const x = r.journal.recovered?.recovery;
    lines.push(
      r.journal.error
        ? `Settlement journal: recovery failed: ${r.journal.error}`
        : x
          ? `Settlement journal: recovered (${x.replayed} applied, ${x.estimated} estimated, ${x.interrupted} interrupted)`
          : 'Settlement journal: none',
    );
  }
  lines.push(`Estimated or uncertain rows: ${r.uncertain.found} found, ${r.uncertain.settled.length} ${r.fix ? 'settled' : 'settleable'}, ${r.uncertain.unresolved.length} unresolved`);
  for (const s of r.uncertain.settled) {
    lines.push(`  ${s.generationId} (${s.modelRevision}, ${s.was}) from ${s.source}: ${s.before.inputTokens}+${s.before.outputTokens} → ${s.after.inputTokens}+${s.after.outputTokens} tokens, ${usd(s.before.costNanoUsd)} → ${usd(s.after.costNanoUsd)}`);
  }
  const res = r.reservations;
  lines.push(`Reservations: ${res.ran ? `reconciled ${JSON.stringify(res.result)}` : res.error ? `failed: ${res.error}` : 'not reconciled'}; held ${res.held ?? 0}, past expiry ${res.expiredHeld ?? 0}`);
  const l = r.leases;
  lines.push(
    `Leases: ${l.reclaimed ? `reclaimed ${l.reclaimed.leases} (${usd(l.reclaimed.returnedNano)} back); ` : l.error ? `reclaim failed: ${l.error}; ` : ''}${l.outstanding} outstanding holding ${usd(l.heldNano)}, ${l.lapsed} past hold_until + grace; leased money ${l.mismatches.length === 0 ? 'matches the leases' : `differs on ${l.mismatches.length} row(s)`}`,
  );
  lines.push(`Budgets: ${r.budgets.rows} row(s), ${r.budgets.overruns.length} over budget`);
  lines.push('');
  lines.push('Ledger by tenant and revision (records, input, output, cached tokens, cost):');
  for (const g of r.usage.ledger) lines.push(`  ${g.tenantId}  ${g.modelRevision}  ${g.records}  ${g.inputTokens}  ${g.outputTokens}  ${g.cachedInputTokens}  ${usd(g.costNanoUsd)}`);
  const t = r.usage.ledgerTotals;
  lines.push(`  total  ${t.records} records  ${t.inputTokens} in  ${t.outputTokens} out  ${t.cachedInputTokens} cached  ${usd(t.costNanoUsd)}`);
  lines.push(`Cost = tokens × prices: ${r.usage.cost.ok ? 'exact' : `${r.usage.cost.mismatches.count} row(s) differ`} (recomputed ${usd(r.usage.cost.expectedNanoUsd)}${r.usage.cost.capped > 0 ? `; ${r.usage.cost.capped} estimate(s) capped at their worst case` : ''})`);
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
  if (r.ok) lines.push('OK: the ledger agrees with every independent count, and nothing is held past its expiry.');
  else {
    lines.push(`DIFFERENCES (${r.differences.length}):`);
    for (const d of r.differences) lines.push(`  - ${d}`);
  }
  return lines.join('\n');
}
