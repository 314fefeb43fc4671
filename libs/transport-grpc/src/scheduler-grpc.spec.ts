import { type LeaseUsageReport, type ScheduleRequest, type ScheduleResult, type SchedulerService, systemClock } from '@weir/core';
import { createSlotScheduler } from '@weir/scheduling';
import { contractCallers } from '@weir/testing';
import { createSchedulerGrpcClient, createSchedulerGrpcServer } from './index';
import { eventually, serve, stopEverythingAfterEach, track } from './test-support';

stopEverythingAfterEach();

const request = (signal = new AbortController().signal) => ({
  caller: contractCallers.acme,
  revisionId: 'solo@1',
  tokens: 10,
  deadlineAt: performance.now() + 10_000,
  signal,
});

describe('scheduler over gRPC', () => {
  it('frees the queue entry on the server when the client signal cancels Acquire', async () => {
    const impl = createSlotScheduler({ replicas: [{ id: 'solo@1/0', revisionId: 'solo@1', slots: 1 }], clock: systemClock });
    const binding = createSchedulerGrpcServer(impl);
    const server = await serve([binding]);
    const client = track(createSchedulerGrpcClient({ address: server.address }));

    const held = await client.acquire(request());
    expect(held.ok).toBe(true);
    const controller = new AbortController();
    const waiting = client.acquire(request(controller.signal));
    expect(await eventually(() => impl.stats().queued['solo@1'] === 1)).toBe(true);
    expect(binding.waiting()).toBe(1);

    controller.abort();
    expect(await waiting).toMatchObject({ ok: false, reason: 'cancelled' });
    expect(await eventually(() => impl.stats().queued['solo@1'] === 0 && binding.waiting() === 0)).toBe(true);

    // The slot is still the held lease's: releasing it frees the replica completely.
    if (held.ok) held.lease.release();
    expect(await eventually(() => impl.stats().inFlight['solo@1/0'] === 0 && binding.heldLeases() === 0)).toBe(true);
  });

  it('releases a slot granted to a call that was already cancelled', async () => {
    let released = 0;
    let grantedAfterCancel = false;
    const controller = new AbortController();
    // The client cancels as soon as the call arrives; the scheduler grants only once it has
    // seen the cancellation (ignoring it), so the grant always loses the race.
    const slow: SchedulerService = {
      acquire: (req) => {
        controller.abort();
        return new Promise<ScheduleResult>((resolve) =>
          req.signal.addEventListener('abort', () => {
            grantedAfterCancel = req.signal.aborted;
            resolve({ ok: true, lease: { replicaId: 'r/0', queueMs: 80, release: () => void released++ } });
          }),
        );
      },
    };
    const binding = createSchedulerGrpcServer(slow);
    const server = await serve([binding]);
    const client = track(createSchedulerGrpcClient({ address: server.address }));
    expect(await client.acquire(request(controller.signal))).toMatchObject({ ok: false, reason: 'cancelled' });
    expect(await eventually(() => released === 1)).toBe(true);
    expect(grantedAfterCancel).toBe(true);
    expect(await eventually(() => binding.heldLeases() === 0)).toBe(true);
    await new Promise((r) => setTimeout(r, 20));
    expect(released).toBe(1);
  });

  it("sends Release once for a lease's release(), however often it is called", async () => {
    const impl = createSlotScheduler({ replicas: [{ id: 'solo@1/0', revisionId: 'solo@1', slots: 2 }], clock: systemClock });
    const binding = createSchedulerGrpcServer(impl);
    const server = await serve([binding]);
    const client = track(createSchedulerGrpcClient({ address: server.address }));
    const a = await client.acquire(request());
    const b = await client.acquire(request());
    expect(binding.heldLeases()).toBe(2);
    if (!a.ok || !b.ok) throw new Error('expected leases');
    a.lease.release();
    a.lease.release();
    expect(await eventually(() => binding.heldLeases() === 1)).toBe(true);
    expect(impl.stats().inFlight['solo@1/0']).toBe(1);
    b.lease.release();
    expect(await eventually(() => impl.stats().inFlight['solo@1/0'] === 0)).toBe(true);
  });

  it('carries priority, input tokens, bytes, the retry hint and the usage report across the wire', async () => {
    const seen: ScheduleRequest[] = [];
    const reports: Array<LeaseUsageReport | undefined> = [];
    const fake: SchedulerService = {
      acquire: async (req) => {
        seen.push(req);
        if (req.priority === 'batch') return { ok: false, reason: 'shed', message: 'brownout', queueMs: 0, retryAfterMs: 5_000 };
        return { ok: true, lease: { replicaId: 'r/0', queueMs: 0, release: (report) => void reports.push(report) } };
      },
    };
    const server = await serve([createSchedulerGrpcServer(fake)]);
    const client = track(createSchedulerGrpcClient({ address: server.address }));
    expect(await client.acquire({ ...request(), priority: 'batch', inputTokens: 7, bytes: 123 })).toEqual({ ok: false, reason: 'shed', message: 'brownout', queueMs: 0, retryAfterMs: 5_000 });
    expect(seen[0]).toMatchObject({ priority: 'batch', inputTokens: 7, bytes: 123, tokens: 10 });
    const granted = await client.acquire(request());
    expect(seen[1]).toMatchObject({ priority: 'interactive', inputTokens: 0 });
    expect(seen[1].bytes).toBeUndefined();
    if (!granted.ok) throw new Error('expected a lease');
    granted.lease.release({ inputTokens: 7, outputTokens: 20, ttftMs: null, durationMs: 33 });
    expect(await eventually(() => reports.length === 1)).toBe(true);
    expect(reports[0]).toEqual({ inputTokens: 7, outputTokens: 20, ttftMs: null, durationMs: 33 });
  });

  it('releases every held lease when the server closes', async () => {
    const impl = createSlotScheduler({ replicas: [{ id: 'solo@1/0', revisionId: 'solo@1', slots: 1 }], clock: systemClock });
    const server = await serve([createSchedulerGrpcServer(impl)]);
    const client = track(createSchedulerGrpcClient({ address: server.address }));
    expect((await client.acquire(request())).ok).toBe(true);
    expect(impl.stats().inFlight['solo@1/0']).toBe(1);
    await server.close();
    expect(impl.stats().inFlight['solo@1/0']).toBe(0);
  });
});
