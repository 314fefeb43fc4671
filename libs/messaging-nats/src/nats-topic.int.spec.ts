import { context, propagation, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { TraceState, W3CTraceContextPropagator } from '@opentelemetry/core';
import type { NatsConnection } from '@nats-io/transport-node';
import type { CancelMessage, ReplicaHealthEvent } from '@weir/core';
import { describeTopicContract, uniqueTag, waitUntil } from '@weir/testing';
import { connectNats } from './connect';
import { createNatsTopic } from './nats-topic';
import { SHARED_NATS_URL } from './test-support';
import { cancelMessageCodec, replicaHealthEventCodec } from './topic-codecs';

async function twoConnections(): Promise<[NatsConnection, NatsConnection]> {
  const tag = uniqueTag();
  return Promise.all([
    connectNats({ servers: SHARED_NATS_URL, name: `weir-test-pub-${tag}` }),
    connectNats({ servers: SHARED_NATS_URL, name: `weir-test-sub-${tag}` }),
  ]);
}

describeTopicContract<CancelMessage>(
  'NATS core (weir.cancel shape, shared server)',
  async () => {
    const [a, b] = await twoConnections();
    const subject = `weir-test.${uniqueTag()}.cancel`;
    return {
      publisher: createNatsTopic(a, subject, cancelMessageCodec),
      subscriber: createNatsTopic(b, subject, cancelMessageCodec),
      settle: async () => {
        await Promise.all([a.flush(), b.flush()]);
      },
      cleanup: async () => {
        await Promise.all([a.close(), b.close()]);
      },
    };
  },
  (i) => ({ generationId: `gen_${i}`, tenantId: `t${i % 2}`, cause: i % 2 ? 'cancel_requested' : 'client_disconnected' }),
);

describeTopicContract<ReplicaHealthEvent>(
  'NATS core (weir.health shape, shared server)',
  async () => {
    const [a, b] = await twoConnections();
    const subject = `weir-test.${uniqueTag()}.health`;
    return {
      publisher: createNatsTopic(a, subject, replicaHealthEventCodec),
      subscriber: createNatsTopic(b, subject, replicaHealthEventCodec),
      settle: async () => {
        await Promise.all([a.flush(), b.flush()]);
      },
      cleanup: async () => {
        await Promise.all([a.close(), b.close()]);
      },
    };
  },
  (i) => ({ replicaId: `r${i}`, revisionId: 'tiny@1', state: i % 2 ? 'unhealthy' : 'healthy', reason: i % 2 ? 'timeout' : 'recovered', at: 1_700_000_000_000 + i }),
);

describe('createNatsTopic', () => {
  let a: NatsConnection;
  let b: NatsConnection;
  let subject: string;

  beforeEach(async () => {
    [a, b] = await twoConnections();
    subject = `weir-test.${uniqueTag()}.cancel`;
  });
  afterEach(async () => {
    await Promise.all([a.close(), b.close()]);
  });

  it('propagates the trace context: exact lowercase headers out, handler runs in the remote context', async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    try {
      const raw: Record<string, string>[] = [];
      b.subscribe(subject, {
        callback: (_err, msg) => {
          raw.push(Object.fromEntries((msg.headers?.keys() ?? []).map((k) => [k, msg.headers?.get(k) ?? ''])));
        },
      });
      const seen: { traceId?: string; parentSpanId?: string; isRemote?: boolean; traceState?: string }[] = [];
      createNatsTopic(b, subject, cancelMessageCodec).subscribe(() => {
        const sc = trace.getSpanContext(context.active());
        seen.push({ traceId: sc?.traceId, parentSpanId: sc?.spanId, isRemote: sc?.isRemote, traceState: sc?.traceState?.serialize() });
      });
      await b.flush();
      const publisher = createNatsTopic(a, subject, cancelMessageCodec);
      const spanContext = {
        traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
        spanId: '00f067aa0ba902b7',
        traceFlags: TraceFlags.SAMPLED,
        traceState: new TraceState('weir=abc,other=1'),
      };
      context.with(trace.setSpanContext(context.active(), spanContext), () =>
        publisher.publish({ generationId: 'gen_1', tenantId: 't1', cause: 'cancel_requested' }),
      );
      // Outside any span: no trace headers, and the handler sees no remote parent.
      publisher.publish({ generationId: 'gen_2', tenantId: 't1', cause: 'cancel_requested' });
      await a.flush();
      await waitUntil(() => seen.length === 2 && raw.length === 2);
      expect(raw[0].traceparent).toBe('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
      expect(raw[0].tracestate).toBe('weir=abc,other=1');
      expect(raw[1].traceparent).toBeUndefined();
      expect(seen[0]).toEqual({ traceId: spanContext.traceId, parentSpanId: spanContext.spanId, isRemote: true, traceState: 'weir=abc,other=1' });
      expect(seen[1].traceId).toBeUndefined();
    } finally {
      propagation.disable();
      context.disable();
    }
  });

  it('logs and skips a malformed message without logging its payload', async () => {
    const warnings: object[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: (f: object) => warnings.push(f), error: () => undefined };
    const kinds: string[] = [];
    const got: CancelMessage[] = [];
    createNatsTopic(b, subject, cancelMessageCodec, { logger, onError: (_e, kind) => kinds.push(kind) }).subscribe((m) => got.push(m));
    await b.flush();
    a.publish(subject, JSON.stringify({ generationId: 'g', tenantId: 't', cause: 'prompt text here' }));
    a.publish(subject, 'not json');
    createNatsTopic(a, subject, cancelMessageCodec).publish({ generationId: 'gen_ok', tenantId: 't', cause: 'cancel_requested' });
    await a.flush();
    await waitUntil(() => got.length === 1 && kinds.length === 2);
    expect(kinds).toEqual(['decode', 'decode']);
    expect(got[0].generationId).toBe('gen_ok');
    expect(JSON.stringify(warnings)).not.toContain('prompt text here');
  });

  it('never throws from publish, even on a closed connection', async () => {
    const topic = createNatsTopic(a, subject, cancelMessageCodec);
    await a.close();
    expect(() => topic.publish({ generationId: 'g', tenantId: 't', cause: 'cancel_requested' })).not.toThrow();
    expect(() => topic.subscribe(() => undefined)()).not.toThrow();
  });
});
