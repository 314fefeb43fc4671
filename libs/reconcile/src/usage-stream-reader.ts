/**
 * Reads the usage stream's records for a window with a fresh ephemeral ordered consumer, so
 * the ledger's durable consumer is never touched, and deduplicates them by generation id the
 * way the ledger does (JetStream already drops a republish with the same `Nats-Msg-Id` inside
 * its duplicate window; later copies are dropped here): the first record of a generation in
 * stream order is the one that counts.
 */
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { StreamUsageRecord } from '@weir/ledger';
import { decodeUsageMessage } from '@weir/messaging-nats';

/** Options of {@link readUsageStream}. */
export interface ReadUsageStreamOptions {
  /** The usage stream, e.g. `WEIR_USAGE` (`natsNames(namespace).usageStream`). */
  stream: string;
  /** Records whose `finishedAt` is at or after this count. Default: all. */
  since?: Date;
  /** Records whose `finishedAt` is before this count. Default: no end. */
  until?: Date;
  /**
   * Messages are read from `since − slackMs` (publish time), since a record is published after
   * it finished, on a clock that may differ a little from the NATS server's. Default 600,000.
   */
  slackMs?: number;
  /** Longest wait for the next message before giving up (ms). Default 10,000. */
  idleTimeoutMs?: number;
}

/** What {@link readUsageStream} read. */
export interface UsageStreamRead {
  /** One record per generation in the window (first in stream order). */
  records: StreamUsageRecord[];
  /** Messages read (every copy, in or out of the window). */
  messages: number;
  /** Later copies of a generation already read (dropped, as the ledger drops them). */
  duplicates: number;
  /** Of `duplicates`, copies whose counts differ from the first (e.g. a hung relay's late record after the gateway's uncertain one). */
  differingDuplicates: number;
  /** Messages that are not usage records or settlements. */
  malformed: number;
  /** Settlements of keys whose generation died before any output (no usage row): read, not compared. */
  interruptions: number;
  /** Publish time of the stream's oldest stored message; null when the stream is empty. */
  firstMessageAt: Date | null;
  /**
   * False when the stream's oldest message is younger than the window's start (records aged
   * out by the stream's `max_age`): the stream cannot be compared for the window then.
   */
  coversWindow: boolean;
}

/**
 * Reads the window's usage records up to the stream's last message at the time of the call.
 * @throws the JetStream API error when the stream does not exist or the server refuses;
 *   Error when the next message does not arrive within `idleTimeoutMs`.
 */
export async function readUsageStream(nc: NatsConnection, options: ReadUsageStreamOptions): Promise<UsageStreamRead> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(options.stream);
  const { first_seq: firstSeq, last_seq: lastSeq, messages: stored } = info.state;
  const firstMessageAt = stored > 0 && info.state.first_ts ? new Date(info.state.first_ts) : null;
  const slackMs = options.slackMs ?? 600_000;
  const coversWindow = !options.since || (firstMessageAt !== null && firstMessageAt.getTime() <= options.since.getTime() - slackMs) || firstSeq <= 1;
  const result: UsageStreamRead = { records: [], messages: 0, duplicates: 0, differingDuplicates: 0, malformed: 0, interruptions: 0, firstMessageAt, coversWindow };
  if (stored === 0) return result;

  const start = options.since ? new Date(options.since.getTime() - slackMs) : undefined;
  const consumer = await jetstream(nc).consumers.get(options.stream, {
    name_prefix: 'weir-reconcile',
    ...(start ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.toISOString() } : { deliver_policy: DeliverPolicy.All }),
  });
  // Nothing published since the start time: the consumer would wait for new messages.
  const pending = (await consumer.info()).num_pending;
  if (pending === 0) {
    await consumer.delete().catch(() => undefined);
    return result;
  }

  const seen = new Map<string, StreamUsageRecord>();
  const idleTimeoutMs = options.idleTimeoutMs ?? 10_000;
  const messages = await consumer.consume({ max_messages: 512 });
  let idle: NodeJS.Timeout | undefined;
  const armIdle = () => {
    if (idle) clearTimeout(idle);
    idle = setTimeout(() => messages.stop(new Error(`no usage message within ${idleTimeoutMs} ms`)), idleTimeoutMs);
  };
  armIdle();
  try {
    for await (const m of messages) {
      armIdle();
      result.messages += 1;
      // Two formats share the stream: settlements (ADR 0002, the JetStream settlement journal)
      // and usage records of the older usage sink; the ledger keeps the first of a generation
      // whichever it is.
      const decoded = decodeUsageMessage(m.data);
      const usage = !decoded.ok ? undefined : decoded.kind === 'usage' ? decoded.record : decoded.item.kind === 'settle' ? decoded.item.entry.usage : undefined;
      if (!decoded.ok) {
        result.malformed += 1;
      } else if (!usage) {
        result.interruptions += 1;
      } else {
        const r = usage;
        const record: StreamUsageRecord = {
          generationId: r.generationId,
          tenantId: r.tenantId,
          modelRevision: r.modelRevision,
          inputTokens: r.inputTokens,
          outputTokens: r.outputTokens,
          cachedInputTokens: r.cachedInputTokens,
          costNanoUsd: r.costNanoUsd,
        };
        const first = seen.get(record.generationId);
        if (first) {
          result.duplicates += 1;
          if (first.inputTokens !== record.inputTokens || first.outputTokens !== record.outputTokens || first.costNanoUsd !== record.costNanoUsd) {
            result.differingDuplicates += 1;
          }
        } else {
          seen.set(record.generationId, record);
          const at = r.finishedAt.getTime();
          if ((!options.since || at >= options.since.getTime()) && (!options.until || at < options.until.getTime())) result.records.push(record);
        }
      }
      if (m.seq >= lastSeq || m.info.pending === 0) break;
    }
  } finally {
    if (idle) clearTimeout(idle);
    messages.stop();
    await consumer.delete().catch(() => undefined);
  }
  if (result.messages < pending && result.messages === 0) throw new Error('the usage stream ended before its pending messages were read');
  return result;
}
