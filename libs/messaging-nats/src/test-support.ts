// Helpers shared by this library's integration tests (not exported from index.ts).
import type { NatsConnection } from '@nats-io/transport-node';
import { uniqueTag } from '@weir/testing';
import { connectNats } from './connect';
import { createNatsUsageSink, type NatsUsageSink, type NatsUsageSinkOptions } from './nats-usage-sink';
import { createNatsUsageSource, type NatsUsageSource, type NatsUsageSourceOptions } from './nats-usage-source';
import { deleteStream, ensureUsageStream } from './usage-stream';

/** The shared test server: `WEIR_NATS_URL`, else 127.0.0.1:4222 (never stopped by tests). */
export const SHARED_NATS_URL = process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222';

/** A usage stream with unique names on a server, plus helpers to make sinks and sources on it. */
export interface UsageStreamFixture {
  nc: NatsConnection;
  stream: string;
  subjectPrefix: string;
  durable: string;
  sink(options?: NatsUsageSinkOptions): NatsUsageSink;
  source(options?: NatsUsageSourceOptions): NatsUsageSource;
  /** Closes the sinks and sources made here, deletes the stream and closes the connection. */
  cleanup(): Promise<void>;
}

/** Creates a uniquely named usage stream (`WEIR_USAGE_TEST_<tag>` on `weir-test.<tag>.usage.>`). */
export async function usageStreamFixture(url = SHARED_NATS_URL, connectionName = 'weir-test'): Promise<UsageStreamFixture> {
  const tag = uniqueTag();
  const nc = await connectNats({ servers: url, name: `${connectionName}-${tag}`, reconnectTimeWaitMs: 200, reconnectJitterMs: 50 });
  const stream = `WEIR_USAGE_TEST_${tag}`;
  const subjectPrefix = `weir-test.${tag}.usage`;
  const durable = `weir-ledger-test-${tag}`;
  await ensureUsageStream(nc, { stream, subjects: [`${subjectPrefix}.>`], duplicateWindowMs: 60_000, maxAgeMs: 3_600_000 });
  const sinks: NatsUsageSink[] = [];
  const sources: NatsUsageSource[] = [];
  return {
    nc,
    stream,
    subjectPrefix,
    durable,
    sink(options = {}) {
      const s = createNatsUsageSink(nc, { subjectPrefix, retryBaseMs: 50, retryMaxMs: 500, publishTimeoutMs: 2_000, ...options });
      sinks.push(s);
      return s;
    },
    source(options = {}) {
      const s = createNatsUsageSource(nc, { stream, durable, ackWaitMs: 2_000, retryBaseMs: 100, retryMaxMs: 500, pullExpiresMs: 5_000, ...options });
      sources.push(s);
      return s;
    },
    async cleanup() {
      await Promise.all(sources.map((s) => s.stop()));
      await Promise.all(sinks.map((s) => s.close({ timeoutMs: 2_000 })));
      if (!nc.isClosed()) {
        await deleteStream(nc, stream).catch(() => undefined);
        await nc.close();
      }
    },
  };
}
