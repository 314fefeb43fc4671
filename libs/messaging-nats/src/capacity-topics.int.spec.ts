import type { NatsConnection } from '@nats-io/transport-node';
import { type CapacityDecision, createCapacityController, type PoolTelemetrySample } from '@weir/capacity';
import { uniqueTag, waitUntil } from '@weir/testing';
import { createCapacityDecisionPublisher, createCapacityTelemetryPublisher, subscribeCapacityDecisions, subscribeCapacityTelemetry } from './capacity-topics';
import { connectNats } from './connect';
import { SHARED_NATS_URL } from './test-support';

/** Scheduler → NATS → controller → NATS → a consumer, on a namespace of its own. */
describe('capacity topics over NATS (shared server)', () => {
  let scheduler: NatsConnection;
  let controlPlane: NatsConnection;
  let consumer: NatsConnection;
  const ns = `wt${uniqueTag()}`;

  beforeAll(async () => {
    [scheduler, controlPlane, consumer] = await Promise.all(['scheduler', 'control-plane', 'consumer'].map((n) => connectNats({ servers: SHARED_NATS_URL, name: `weir-test-${n}-${ns}` })));
  });
  afterAll(async () => {
    await Promise.all([scheduler, controlPlane, consumer].map((nc) => nc.close()));
  });

  it('a decision made from published telemetry arrives on <ns>.capacity.desired.<pool>', async () => {
    const decisionsPublisher = createCapacityDecisionPublisher(controlPlane, ns);
    const controller = createCapacityController({
      clock: { now: () => Date.now() },
      replicaTokensPerSecondHint: 500,
      onDecision: (d) => decisionsPublisher.publish(d),
    });
    const stopTelemetry = subscribeCapacityTelemetry(controlPlane, ns, (s) => controller.ingest(s));

    const all: CapacityDecision[] = [];
    const dedicated: CapacityDecision[] = [];
    const raw: string[] = [];
    const stopAll = subscribeCapacityDecisions(consumer, ns, (d) => all.push(d));
    const stopOne = subscribeCapacityDecisions(consumer, ns, (d) => dedicated.push(d), { pool: 'acme.dedicated' });
    consumer.subscribe(`${ns}.capacity.desired.>`, { callback: (_e, msg) => void raw.push(msg.subject) });
    await Promise.all([controlPlane.flush(), consumer.flush()]);

    const telemetry = createCapacityTelemetryPublisher(scheduler, ns);
    const at = Date.now();
    const base: PoolTelemetrySample = {
      pool: 'interactive',
      source: 'scheduler-int',
      at,
      queuedRequests: 30,
      queuedOutputTokens: 15_000,
      runningRequests: 2,
      replicas: 2,
      healthyReplicas: 2,
      admittedRequestsTotal: 0,
      completedRequestsTotal: 0,
      outputTokensTotal: 0,
      inputTokensTotal: 0,
      busyReplicaSecondsTotal: 0,
    };
    telemetry.publish(base);
    telemetry.publish({ ...base, pool: 'acme.dedicated', queuedRequests: 0, queuedOutputTokens: 0, replicas: 1, healthyReplicas: 1 });
    await scheduler.flush();

    await waitUntil(() => all.length === 2 && dedicated.length === 1, 5_000, 'decisions did not arrive');
    const interactive = all.find((d) => d.pool === 'interactive');
    // 15,000 queued tokens / 30 s = 500 tokens/s at 500 × 0.7 → 2, + 1.
    expect(interactive).toMatchObject({ desiredReplicas: 3, demandTokensPerSecond: 500, basis: 'hint', currentReplicas: 2 });
    expect(interactive?.lines.length).toBeGreaterThan(5);
    expect(dedicated[0]).toMatchObject({ pool: 'acme.dedicated', currentReplicas: 1, desiredReplicas: 1 });
    expect(raw.sort()).toEqual([`${ns}.capacity.desired.acme~2ededicated`, `${ns}.capacity.desired.interactive`]);
    // The controller holds the same decisions it published.
    expect(controller.decision('interactive')).toEqual(interactive);

    stopTelemetry();
    stopAll();
    stopOne();
  });
});
