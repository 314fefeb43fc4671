import type { CapacityDecision, PoolTelemetrySample } from '@weir/capacity';
import { capacityDecisionCodec, capacitySubjects, poolTelemetrySampleCodec } from './capacity-topics';

const sample: PoolTelemetrySample = {
  pool: 'interactive',
  source: 'scheduler-1',
  at: 1_735_689_600_000,
  queuedRequests: 3,
  queuedOutputTokens: 900,
  runningRequests: 4,
  replicas: 2,
  healthyReplicas: 2,
  admittedRequestsTotal: 10,
  completedRequestsTotal: 6,
  outputTokensTotal: 600,
  inputTokensTotal: 1200,
  busyReplicaSecondsTotal: 12.5,
};

const decision: CapacityDecision = {
  pool: 'interactive',
  desiredReplicas: 4,
  recommendedReplicas: 4,
  currentReplicas: 2,
  healthyReplicas: 2,
  demandTokensPerSecond: 1030,
  observedTokensPerSecond: 1000,
  backlogTokensPerSecond: 30,
  admittedRequestsPerSecond: 10,
  replicaTokensPerSecond: 500,
  basis: 'measured',
  lines: ['answer:   4 replicas'],
  at: '2025-01-01T00:01:00.000Z',
  telemetryAt: '2025-01-01T00:01:00.000Z',
};

const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));

describe('capacitySubjects', () => {
  it('puts each pool in one subject token, escaping what a token cannot hold', () => {
    const s = capacitySubjects('weir');
    expect(s.desired('interactive')).toBe('weir.capacity.desired.interactive');
    expect(s.telemetry('acme.dedicated')).toBe('weir.capacity.telemetry.acme~2ededicated');
    expect(s.desired('gpu/*')).toBe('weir.capacity.desired.gpu~2f~2a');
    expect(s.allDesired).toBe('weir.capacity.desired.*');
    expect(s.allTelemetry).toBe('weir.capacity.telemetry.*');
    expect(capacitySubjects('team-a').desired('batch')).toBe('team-a.capacity.desired.batch');
    expect(() => capacitySubjects('Bad.NS')).toThrow(/WEIR_NATS_NAMESPACE/);
  });
});

describe('capacity codecs', () => {
  it('round-trip a sample and a decision', () => {
    expect(poolTelemetrySampleCodec.decode(poolTelemetrySampleCodec.encode(sample))).toEqual(sample);
    expect(capacityDecisionCodec.decode(capacityDecisionCodec.encode(decision))).toEqual(decision);
  });

  it.each([
    [{ ...sample, pool: '' }, 'pool'],
    [{ ...sample, replicas: 1.5 }, 'replicas'],
    [{ ...sample, outputTokensTotal: -1 }, 'outputTokensTotal'],
    [{ ...sample, at: 'now' }, 'at'],
  ])('refuse a malformed sample (%#: %s)', (value, field) => {
    expect(() => poolTelemetrySampleCodec.decode(bytes(value))).toThrow(new RegExp(`malformed message: ${field}`));
  });

  it.each([
    [{ ...decision, desiredReplicas: -1 }, 'desiredReplicas'],
    [{ ...decision, basis: 'guess' }, 'basis'],
    [{ ...decision, lines: [1] }, 'lines'],
    [{ ...decision, at: 'yesterday' }, 'at'],
    [{ ...decision, replicaTokensPerSecond: null }, 'replicaTokensPerSecond'],
  ])('refuse a malformed decision (%#: %s)', (value, field) => {
    expect(() => capacityDecisionCodec.decode(bytes(value))).toThrow(new RegExp(`malformed message: ${field}`));
  });
});
