import { jetstream, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type SettlementEntry, type SettlementJournal, WeirError, isLogWorthyAttempt, retryDelayMs } from '@weir/core';
import { settlementEntryFault } from '@weir/ledger';
import type { MessagingLogger } from '@weir/messaging';
import { encodeSettlementMessage } from './settlement-codec';
import { captureTraceHeaders, traceHeadersToNats } from './trace-headers';
import { USAGE_SUBJECT_PREFIX, usageSubject } from './usage-stream';

/** Options for {@link createNatsSettlementJournal}. */
export interface NatsSettlementJournalOptions {
  /** Entries go to `<subjectPrefix>.<tenantId>` on the usage stream (see `usageSubject`). Default `weir.usage`. */
  subjectPrefix?: string;
  /** How long one publish waits for its PubAck before it is retried (ms). Default 5,000. */
  publishTimeoutMs?: number;
  /**
   * How long `append` keeps retrying before it rejects (ms). Default 10,000: past it the relay
   * ends the request with an error rather than deliver an answer that was not recorded.
   */
  appendTimeoutMs?: number;
  /** First retry delay (ms); doubles per attempt. Default 50. */
  retryBaseMs?: number;
  /** Longest retry delay (ms). Default 1,000. */
  retryMaxMs?: number;
  /** Appends awaiting their PubAck at which `saturated()` turns true. Default 10,000. */
  capacity?: number;
  /** Publish failures (1st, 2nd, 4th… attempt) and given-up appends are logged here. Default: silent. */
  logger?: MessagingLogger;
}

/** Dependencies of {@link createNatsSettlementJournal}. */
export interface NatsSettlementJournalDeps {
  /** Uniform [0, 1) source for retry jitter. Default `Math.random`. */
  random?: () => number;
}

/** Counters of a {@link NatsSettlementJournal}. */
export interface NatsSettlementJournalStats {
  appended: number;
  /** Appends acknowledged by JetStream (stored, or already stored: see `duplicates`). */
  acked: number;
  /** PubAcks saying the stream already had the generation (a retried or repeated append). */
  duplicates: number;
  /** Publishes that failed and were retried. */
  failedPublishes: number;
  /** Appends that gave up (rejected). */
  rejected: number;
}

/** The JetStream settlement journal (see {@link createNatsSettlementJournal}). */
export interface NatsSettlementJournal extends SettlementJournal {
  /** Appends awaiting their PubAck. */
  pending(): number;
  stats(): NatsSettlementJournalStats;
  /** Refuses further appends (WeirError `shutting_down`) and waits for those in flight. Idempotent; does not close the connection. */
  close(): Promise<void>;
}

/**
 * Creates the settlement journal of the split topology (ADR 0002 §2): `append(entry)` publishes
 * the whole entry (`encodeSettlementMessage`) to the usage stream with `Nats-Msg-Id` = the
 * generation id and resolves once JetStream acknowledged it — the entry has left the process;
 * it is on disk per the server's sync interval. A failed publish (NATS down, PubAck timeout,
 * stream missing) is retried with backoff, `min(retryMaxMs, retryBaseMs × 2^(attempt−1))` ms
 * with 50–100 % jitter, until `appendTimeoutMs`, then `append` rejects with WeirError `internal`
 * (retryable). A retry of a publish JetStream stored is dropped by the stream's duplicate window
 * and, beyond it, by the applier's insert on generation id: never billed twice. The ledger
 * service applies the entries with the settlement applier (`createNatsSettlementSource`).
 *
 * `claim`, `progress` and `release` write nothing: in the split a relay that dies mid-stream is
 * recorded by its gateway (ADR 0002 §3), and per-token traffic stays off NATS. `flush` resolves
 * once every append made so far is acknowledged (not applied: that is the ledger's).
 */
export function createNatsSettlementJournal(nc: NatsConnection, options: NatsSettlementJournalOptions = {}, deps: NatsSettlementJournalDeps = {}): NatsSettlementJournal {
  const subjectPrefix = options.subjectPrefix ?? USAGE_SUBJECT_PREFIX;
  const publishTimeoutMs = Math.max(1, options.publishTimeoutMs ?? 5_000);
  const appendTimeoutMs = Math.max(0, options.appendTimeoutMs ?? 10_000);
  const backoff = { baseMs: Math.max(0, options.retryBaseMs ?? 50), maxMs: 0 };
  backoff.maxMs = Math.max(backoff.baseMs, options.retryMaxMs ?? 1_000);
  const capacity = Math.max(1, options.capacity ?? 10_000);
  const { logger } = options;
  const random = deps.random ?? Math.random;
  const js: JetStreamClient = jetstream(nc, { timeout: publishTimeoutMs });
  const stats: NatsSettlementJournalStats = { appended: 0, acked: 0, duplicates: 0, failedPublishes: 0, rejected: 0 };
  const inFlight = new Set<Promise<void>>();
  let closed = false;
  let closing: Promise<void> | undefined;

  async function publish(subject: string, msgID: string, data: Uint8Array, trace: Record<string, string>): Promise<void> {
    const giveUpAt = Date.now() + appendTimeoutMs;
    for (let attempt = 1; ; attempt++) {
      try {
        const ack = await js.publish(subject, data, { msgID, headers: traceHeadersToNats(trace), timeout: publishTimeoutMs });
        stats.acked++;
        if (ack.duplicate) stats.duplicates++;
        return;
      } catch (error) {
        stats.failedPublishes++;
        const delay = retryDelayMs(attempt, backoff, random);
        if (isLogWorthyAttempt(attempt)) logger?.warn({ err: error, attempt, retryInMs: delay }, 'settlement publish failed; will retry');
        if (Date.now() + delay > giveUpAt) {
          stats.rejected++;
          logger?.error({ err: error, attempts: attempt }, 'settlement not journaled: JetStream did not acknowledge it in time');
          throw new WeirError('internal', 'the settlement could not be journaled', { retryable: true, cause: error });
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  return {
    append(entry: SettlementEntry) {
      if (closed) return Promise.reject(new WeirError('shutting_down', 'the settlement journal is closed'));
      const fault = settlementEntryFault(entry);
      if (fault) return Promise.reject(new WeirError('internal', `malformed settlement entry: ${fault}`));
      stats.appended++;
      const p = publish(usageSubject(subjectPrefix, entry.usage.tenantId), entry.usage.generationId, encodeSettlementMessage({ kind: 'settle', entry }), captureTraceHeaders());
      inFlight.add(p);
      const done = () => inFlight.delete(p);
      p.then(done, done);
      return p;
    },
    claim: () => (closed ? Promise.reject(new WeirError('shutting_down', 'the settlement journal is closed')) : Promise.resolve()),
    progress: () => undefined,
    release: () => undefined,
    async flush() {
      await Promise.allSettled([...inFlight]);
    },
    saturated: () => inFlight.size >= capacity,
    pending: () => inFlight.size,
    stats: () => ({ ...stats }),
    close() {
      closed = true;
      closing ??= Promise.allSettled([...inFlight]).then(() => undefined);
      return closing;
    },
  };
}
