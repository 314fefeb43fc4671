import type { NatsConnection } from '@nats-io/transport-node';
import type { UsageRecord, UsageRecordSource } from '@weir/core';
import {
  type BatchDecodeResult,
  type NatsUsageSourceDeps,
  type NatsUsageSourceOptions,
  type NatsUsageSourceStats,
  createJetStreamBatchSource,
} from './jetstream-batch-source';
import { decodeUsageMessage } from './settlement-codec';

export type { MalformedUsageMessage, NatsUsageSourceDeps, NatsUsageSourceOptions, NatsUsageSourceStats } from './jetstream-batch-source';

/** A {@link UsageRecordSource} over a JetStream durable pull consumer. */
export interface NatsUsageSource extends UsageRecordSource {
  /**
   * Creates the durable consumer if missing (explicit acks, deliver all, unlimited
   * deliveries) or updates its `ackWaitMs` / `maxAckPending`, then delivers batches to `handler`
   * one at a time. May be called again after {@link stop}.
   * @throws WeirError `internal` when already started.
   * @throws the JetStream API error when the stream does not exist or the server refuses.
   */
  start(handler: (records: readonly UsageRecord[]) => Promise<void>): Promise<void>;
  /**
   * Stops pulling, waits for the batch in flight to be handled and acked (or nakked), and
   * nakks (no delay) messages received but not yet handed over, so another instance gets them
   * at once. Messages the server had sent that had not arrived are redelivered after
   * `ackWaitMs`. Idempotent; does not close the NATS connection.
   */
  stop(): Promise<void>;
  /** Counters since creation. */
  stats(): NatsUsageSourceStats;
}

/**
 * Creates the ledger's input from the JetStream usage stream: at-least-once delivery of usage
 * records in batches (see `createJetStreamBatchSource`). It reads both message formats on the
 * stream — usage records (`createNatsUsageSink`) and settlement entries
 * (`createNatsSettlementJournal`, of which it takes the usage record). Together with the
 * repository's idempotent insert on `generationId`, no record is lost or billed twice. Within a
 * batch, records are unique by `generationId`.
 */
export function createNatsUsageSource(nc: NatsConnection, options: NatsUsageSourceOptions = {}, deps: NatsUsageSourceDeps = {}): NatsUsageSource {
  const source = createJetStreamBatchSource(nc, decodeUsage, options, deps);
  return {
    start: (handler) => source.start((records) => handler(records)),
    stop: () => source.stop(),
    stats: () => source.stats(),
  };
}

function decodeUsage(data: Uint8Array): BatchDecodeResult<UsageRecord> {
  const decoded = decodeUsageMessage(data);
  if (!decoded.ok) return decoded;
  const record = decoded.kind === 'usage' ? decoded.record : decoded.item.kind === 'settle' ? decoded.item.entry.usage : undefined;
  if (!record) return { ok: false, reason: 'an interruption carries no usage record' };
  return { ok: true, value: record, key: record.generationId };
}
