import type {
  ClaimMark,
  IdempotencySettlement,
  JournalPosition,
  ProgressMark,
  ReservationRef,
  SettlementApplier,
  SettlementBatch,
  SettlementEntry,
  SettlementJournal,
  UsageRecord,
} from '@weir/core';
import { buildUsageRecord } from './usage-records';

/**
 * A {@link ReservationRef} for tests: reservation `res_<generationId>`, worst case 1,000,000
 * nano-USD, the periods of 2026-01-01 and the given lease ids. Overrides win.
 */
export function buildReservationRef(generationId: string, leaseIds: string[] = [], overrides: Partial<ReservationRef> = {}): ReservationRef {
  return { reservationId: `res_${generationId}`, worstCaseNano: 1_000_000, monthStartsOn: '2026-01-01', dayStartsOn: '2026-01-01', leaseIds, ...overrides };
}

/** A settlement entry for {@link buildUsageRecord}`(i, usage, tag)`, without idempotency unless given. */
export function buildSettlementEntry(i: number, usage: Partial<UsageRecord> = {}, tag = 'test', extra: Partial<SettlementEntry> = {}): SettlementEntry {
  return { usage: buildUsageRecord(i, usage, tag), ...extra };
}

/** A progress mark of generation `gen_<tag>_<i>` (tenant `t<i % 3>`, app `app_1`), 5 output tokens so far costing 5,000 nano-USD. Overrides win. */
export function buildProgressMark(i: number, overrides: Partial<ProgressMark> = {}, tag = 'test'): ProgressMark {
  const startedAtMs = Date.UTC(2026, 0, 1) + i * 1_000;
  return {
    generationId: `gen_${tag}_${i}`,
    requestId: `req_${tag}_${i}`,
    tenantId: `t${i % 3}`,
    appId: 'app_1',
    apiKeyId: 'key_1',
    route: 'generations',
    modelAlias: 'tiny',
    modelRevision: 'tiny@1',
    inputTokens: 10,
    outputTokens: 5,
    cachedInputTokens: 0,
    costNanoUsd: 5_000,
    startedAtMs,
    atMs: startedAtMs + 1_500,
    queueMs: 1,
    ttftMs: 20,
    ...overrides,
  };
}

/** A claim of key `key_<tag>_<i>` by generation `gen_<tag>_<i>` (tenant `t<i % 3>`), kept until 2026-01-02. Overrides win. */
export function buildClaimMark(i: number, overrides: Partial<ClaimMark> = {}, tag = 'test'): ClaimMark {
  return {
    tenantId: `t${i % 3}`,
    key: `key_${tag}_${i}`,
    generationId: `gen_${tag}_${i}`,
    bodySha256: 'a'.repeat(64),
    route: 'generations',
    retainUntilMs: Date.UTC(2026, 0, 2),
    atMs: Date.UTC(2026, 0, 1) + i * 1_000,
    ...overrides,
  };
}

/**
 * An in-memory {@link SettlementApplier} for tests: keeps the first settlement per generation
 * (later ones count as duplicates), the keys written, the stored position per journal, and
 * every batch it was given. `failNext(n)` makes the next `n` calls to `apply` reject (nothing
 * applied), `gate` (when set) is awaited before each batch applies.
 */
export interface InMemorySettlementApplier extends SettlementApplier {
  readonly rows: Map<string, SettlementEntry>;
  readonly keys: Map<string, IdempotencySettlement>;
  readonly positions: Map<string, JournalPosition>;
  readonly batches: SettlementBatch[];
  failNext(n: number): void;
  gate?: () => Promise<void>;
}

/** Creates an {@link InMemorySettlementApplier}. */
export function createInMemorySettlementApplier(): InMemorySettlementApplier {
  let failures = 0;
  const self: InMemorySettlementApplier = {
    rows: new Map(),
    keys: new Map(),
    positions: new Map(),
    batches: [],
    failNext(n) {
      failures = n;
    },
    async apply(batch) {
      await self.gate?.();
      if (failures > 0) {
        failures--;
        throw new Error('injected applier failure');
      }
      self.batches.push(batch);
      let inserted = 0;
      let duplicates = 0;
      let idempotencyWritten = 0;
      for (const item of batch.items) {
        if (item.kind === 'interrupted') {
          self.keys.set(`${item.idempotency.tenantId}/${item.idempotency.key}`, item.idempotency);
          idempotencyWritten++;
          continue;
        }
        if (self.rows.has(item.entry.usage.generationId)) {
          duplicates++;
          continue;
        }
        self.rows.set(item.entry.usage.generationId, item.entry);
        inserted++;
        if (item.entry.idempotency) {
          self.keys.set(`${item.entry.idempotency.tenantId}/${item.entry.idempotency.key}`, item.entry.idempotency);
          idempotencyWritten++;
        }
      }
      if (batch.position) self.positions.set(batch.journal, batch.position);
      return { inserted, duplicates, idempotencyWritten, overspends: [] };
    },
    async position(journal) {
      return self.positions.get(journal);
    },
  };
  return self;
}

/**
 * A {@link SettlementJournal} for unit tests that keeps everything in memory: every appended
 * entry (`entries`), their usage records (`records`, the array given, so a test can pass its
 * own), claim marks, the last progress mark per generation and released generations. `append`
 * resolves at once (the entry is "out of the process" the moment it is in the array);
 * `failAppends(n)` makes the next `n` appends reject.
 */
export interface RecordingSettlements extends SettlementJournal {
  readonly entries: SettlementEntry[];
  readonly records: UsageRecord[];
  readonly claims: ClaimMark[];
  readonly progressMarks: Map<string, ProgressMark>;
  readonly released: string[];
  failAppends(n: number): void;
}

/** Creates a {@link RecordingSettlements}; `records` collects the usage records (default a new array). */
export function createRecordingSettlements(records: UsageRecord[] = []): RecordingSettlements {
  let failures = 0;
  const self: RecordingSettlements = {
    entries: [],
    records,
    claims: [],
    progressMarks: new Map(),
    released: [],
    failAppends(n) {
      failures = n;
    },
    async append(entry) {
      if (failures > 0) {
        failures--;
        throw new Error('injected append failure');
      }
      self.entries.push(entry);
      records.push(entry.usage);
    },
    async claim(claim) {
      self.claims.push(claim);
    },
    progress(generationId, mark) {
      self.progressMarks.set(generationId, mark());
    },
    release(generationId) {
      self.released.push(generationId);
    },
    async flush() {},
    saturated: () => false,
  };
  return self;
}
