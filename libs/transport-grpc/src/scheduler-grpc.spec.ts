import { type ScheduleResult, type SchedulerService, systemClock } from '@weir/core';
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
    // Grants 80 ms after the call arrives, whatever happens to its signal; the client cancels
    // 10 ms after arrival, so the grant races the cancel.
    const slow: SchedulerService = {
      acquire: (req) => {
        setTimeout(() => controller.abort(), 10);
        return new Promise<ScheduleResult>((resolve) =>
          setTimeout(() => {
            grantedAfterCancel = req.signal.aborted;
            resolve({ ok: true, lease: { replicaId: 'r/0', queueMs: 80, release: () => void released++ } });
          }, 80),
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
