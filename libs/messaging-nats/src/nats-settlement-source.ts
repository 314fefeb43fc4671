import type { NatsConnection } from '@nats-io/transport-node';
import type { SettlementItem, UsageRecord } from '@weir/core';
import {
  type BatchDecodeResult,
  type BatchInfo,
  type NatsUsageSourceDeps,
  type NatsUsageSourceOptions,
  type NatsUsageSourceStats,
  createJetStreamBatchSource,
} from './jetstream-batch-source';
import { type UsageMessage, decodeUsageMessage } from './settlement-codec';

/** One batch of the usage stream for the ledger's settlement applier. */
export interface SettlementBatchFromStream {
  /** Settlements (`createNatsSettlementJournal`), in stream order: apply them with the settlement applier. */
  items: SettlementItem[];
  /**
   * Usage records in the older format (`createNatsUsageSink`), whose reservations admission
   * settled itself: insert them as usage rows only, never charge them again.
   */
  usageRecords: UsageRecord[];
  /** The highest stream sequence in the batch (the journal position the applier may record). */
  lastSequence: number;
}

/** The ledger's input from the usage stream, as settlements. */
export interface NatsSettlementSource {
  /**
   * Delivers batches to `handler` one at a time (see `createJetStreamBatchSource`): a batch is
   * acked only after `handler` resolved, redelivered after it rejected or the process died, so
   * `handler` must be idempotent (the settlement applier and the usage repository are).
   * @throws WeirError `internal` when already started; the JetStream API error when the stream
   *   does not exist or the server refuses.
   */
  start(handler: (batch: SettlementBatchFromStream) => Promise<void>): Promise<void>;
  /** Stops pulling; the batch in flight finishes (see `JetStreamBatchSource.stop`). Idempotent. */
  stop(): Promise<void>;
  stats(): NatsUsageSourceStats;
}

/**
 * Creates the settlement source over the usage stream's durable consumer (the split topology's
 * ledger): settlement entries published by `createNatsSettlementJournal`, and usage records of
 * producers still on `createNatsUsageSink`. Within a batch, each generation appears once.
 */
export function createNatsSettlementSource(nc: NatsConnection, options: NatsUsageSourceOptions = {}, deps: NatsUsageSourceDeps = {}): NatsSettlementSource {
  const source = createJetStreamBatchSource(nc, decode, options, deps);
  return {
    start: (handler) =>
      source.start((values: readonly UsageMessage[], info: BatchInfo) => {
        const batch: SettlementBatchFromStream = { items: [], usageRecords: [], lastSequence: info.lastSequence };
        for (const v of values) {
          if (!v.ok) continue;
          if (v.kind === 'usage') batch.usageRecords.push(v.record);
          else batch.items.push(v.item);
        }
        return handler(batch);
      }),
    stop: () => source.stop(),
    stats: () => source.stats(),
  };
}

function decode(data: Uint8Array): BatchDecodeResult<UsageMessage> {
  const decoded = decodeUsageMessage(data);
  if (!decoded.ok) return decoded;
  const key =
    decoded.kind === 'usage'
      ? decoded.record.generationId
      : decoded.item.kind === 'settle'
        ? decoded.item.entry.usage.generationId
        : `interrupted:${decoded.item.idempotency.tenantId}/${decoded.item.idempotency.key}`;
  return { ok: true, value: decoded, key };
}
