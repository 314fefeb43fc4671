import { createPoolScheduler } from './pool-scheduler';
import { createSchedulerSampler, replicaSamples, schedulerMetricsObserver, schedulerSample } from './scheduler-metrics';

describe('scheduler metrics adapters', () => {
  it('records rejections and queue time (s) into the sink, and samples queues, pools and replicas', async () => {
    const calls: string[] = [];
    const sink = {
      recordSchedulerRejection: (r: { pool: string; tenant: string; priority: string; reason: string }) => calls.push(`reject ${r.pool} ${r.tenant} ${r.priority} ${r.reason}`),
      recordSchedulerQueueTime: (q: { outcome: string; queueS: number }) => calls.push(`queue ${q.outcome} ${q.queueS}`),
      recordExpiredLease: (l: { replica: string }) => calls.push(`expired ${l.replica}`),
    };
    const s = createPoolScheduler({
      replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1, kvTokens: 1_000 }],
      maxQueuePerReplica: 1,
      settings: { tenantQueueShare: 1 },
      rejectUnmeetable: false,
      observer: schedulerMetricsObserver(sink),
      clock: { now: () => 0 },
    });
    const caller = { tenantId: 'demo', appId: 'a', apiKeyId: 'k' };
    const req = { caller, revisionId: 'm@1', tokens: 300, deadlineAt: 60_000, signal: new AbortController().signal };
    const held = await s.acquire(req);
    void s.acquire(req);
    await s.acquire(req);
    expect(calls).toEqual(['queue granted 0', 'reject interactive demo interactive queue_full']);
    expect(schedulerSample(s.stats())).toEqual({
      queues: [{ pool: 'interactive', revision: 'm@1', tenant: 'demo', priority: 'interactive', requests: 1, tokens: 300 }],
      pools: [{ pool: 'interactive', revision: 'm@1', capacityRatio: 1, brownout: false, queueBound: 1 }],
    });
    expect(replicaSamples(s, (_id, inRotation) => inRotation)).toEqual([
      { replica: 'r0', revision: 'm@1', pool: 'interactive', up: true, slotsInUse: 1, slots: 1, slotLimit: 1, kvTokensInUse: 300, kvTokens: 1_000, decodeTokensPerS: 20, prefillTokensPerS: 1_000 },
    ]);
    if (held.ok) held.lease.release();
  });

  it('reports a queue that emptied as 0, not its last depth', async () => {
    const s = createPoolScheduler({ replicas: [{ id: 'r0', revisionId: 'm@1', slots: 1 }], rejectUnmeetable: false, clock: { now: () => 0 } });
    const sample = createSchedulerSampler();
    const req = { caller: { tenantId: 'demo', appId: 'a', apiKeyId: 'k' }, revisionId: 'm@1', tokens: 10, deadlineAt: 60_000, signal: new AbortController().signal };
    const held = await s.acquire(req);
    const queued = s.acquire(req);
    expect(sample(s.stats()).queues).toEqual([{ pool: 'interactive', revision: 'm@1', tenant: 'demo', priority: 'interactive', requests: 1, tokens: 10 }]);
    if (held.ok) held.lease.release();
    const next = await queued;
    expect(sample(s.stats()).queues).toEqual([{ pool: 'interactive', revision: 'm@1', tenant: 'demo', priority: 'interactive', requests: 0, tokens: 0 }]);
    if (next.ok) next.lease.release();
  });
});
