/**
 * `Admit` over loopback (issue 13, item 6): one call reserves at an admission instance and
 * acquires the first slot from the scheduler under the gateway's lease id; refusals, cancels and
 * a dead instance give back what was held; settle and release go to the instance that reserved.
 */
import type { AdmissionService, AdmitRequest, ReservationRef, ReserveResult, ScheduleRequest, ScheduleResult, SlotLease } from '@weir/core';
import { freePort } from '@weir/testing';
import { type AdmitScheduler, createAdmissionGrpcServer, createAdmitGrpcClient } from './index';
import { eventually, serve, stopEverythingAfterEach, track } from './test-support';

stopEverythingAfterEach();

const ref: ReservationRef = { reservationId: 'rsv_a_1', worstCaseNano: 123_456, monthStartsOn: '2026-12-01', dayStartsOn: '2026-12-07', leaseIds: ['lse_t', 'lse_a'] };
const request = (deadlineInMs = 10_000): AdmitRequest => ({
  reservation: {
    caller: { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' },
    requestId: 'req_1',
    generationId: 'gen_1',
    expiresAtMs: Date.now() + 70_000,
    inputTokens: 12,
    maxOutputTokens: 34,
    worstCaseCostNanoUsd: 123_456,
  },
  schedule: { revisionId: 'tiny@1', tokens: 46, inputTokens: 12, bytes: 48, priority: 'interactive', affinityKey: 'acme:abc', deadlineAt: performance.now() + deadlineInMs },
});

/** An admission instance that records what it was asked, reserving `rsv_<name>_n`. */
function instance(name: string, answer?: (n: number) => ReserveResult) {
  const calls: string[] = [];
  let n = 0;
  const impl: AdmissionService = {
    reserve: async () => {
      n++;
      calls.push(`reserve`);
      return answer?.(n) ?? { ok: true, reservationId: `rsv_${name}_${n}`, reservation: { ...ref, reservationId: `rsv_${name}_${n}` }, rateLimits: { requests: { limit: 60, remaining: 59, resetMs: 1_000 } } };
    },
    settle: async (id) => void calls.push(`settle ${id}`),
    release: async (id) => void calls.push(`release ${id}`),
  };
  return { impl, calls };
}

/** The scheduler as the instance sees it: answers with `decide`, recording lease ids and requests. */
function schedulerFake(decide: (r: ScheduleRequest) => Promise<ScheduleResult> | ScheduleResult) {
  const asked: { leaseId: string; request: ScheduleRequest }[] = [];
  const released: string[] = [];
  const scheduler: AdmitScheduler = {
    async acquireAs(leaseId, r) {
      asked.push({ leaseId, request: r });
      const result = await decide(r);
      if (!result.ok) return result;
      return { ok: true, lease: { ...result.lease, release: () => void released.push(leaseId) } };
    },
  };
  return { scheduler, asked, released };
}

/** The gateway's scheduler client as the Admit client uses it: releases by lease id. */
function gatewayScheduler() {
  const released: string[] = [];
  return {
    released,
    scheduler: {
      leaseOf: (leaseId: string, granted: { replicaId: string; queueMs: number }): SlotLease => ({ ...granted, release: () => void released.push(leaseId) }),
      releaseById: (leaseId: string) => void released.push(leaseId),
    },
  };
}

const granted = (replicaId = 'tiny@1/0'): ScheduleResult => ({ ok: true, lease: { replicaId, queueMs: 3, release: () => undefined } });

describe('Admit: reserve and acquire in one call', () => {
  it('returns the reservation with its ref and windows, then the slot acquired under the gateway\'s lease id, released at the scheduler by that id', async () => {
    const a = instance('a');
    const s = schedulerFake(() => granted());
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const gw = gatewayScheduler();
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gw.scheduler }));
    const admitted = await client.admit(request());
    if (!admitted.ok) throw new Error('refused');
    expect(admitted).toMatchObject({ reservationId: 'rsv_a_1', reservation: ref, rateLimits: { requests: { limit: 60, remaining: 59, resetMs: 1_000 } } });
    const scheduled = await admitted.schedule(new AbortController().signal);
    expect(scheduled).toMatchObject({ ok: true, lease: { replicaId: 'tiny@1/0', queueMs: 3 } });
    // The scheduler got the whole request, with the reservation's caller and the deadline rebased.
    expect(s.asked).toHaveLength(1);
    expect(s.asked[0].request).toMatchObject({ caller: { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' }, revisionId: 'tiny@1', tokens: 46, inputTokens: 12, bytes: 48, priority: 'interactive', affinityKey: 'acme:abc' });
    expect(s.asked[0].request.deadlineAt - performance.now()).toBeGreaterThan(8_000);
    if (scheduled.ok) scheduled.lease.release();
    expect(gw.released).toEqual([s.asked[0].leaseId]);
    await admitted.settle({ usage: { inputTokens: 12, outputTokens: 5 }, costNanoUsd: 99 });
    expect(a.calls).toEqual(['reserve', 'settle rsv_a_1']);
  });

  it('answers a rejection without asking the scheduler', async () => {
    const a = instance('a', () => ({ ok: false, reason: 'budget_exhausted', message: 'spent' }));
    const s = schedulerFake(() => granted());
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gatewayScheduler().scheduler }));
    expect(await client.admit(request())).toEqual({ ok: false, reason: 'budget_exhausted', message: 'spent' });
    expect(s.asked).toHaveLength(0);
  });

  it('releases the reservation at the instance on a scheduler refusal, but keeps it after no_replica (the caller may try another revision)', async () => {
    const a = instance('a');
    let reason: 'queue_full' | 'no_replica' = 'queue_full';
    const s = schedulerFake(() => ({ ok: false, reason, message: reason, queueMs: 0, retryAfterMs: 500 }));
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gatewayScheduler().scheduler }));
    const first = await client.admit(request());
    if (!first.ok) throw new Error('refused');
    expect(await first.schedule(new AbortController().signal)).toEqual({ ok: false, reason: 'queue_full', message: 'queue_full', queueMs: 0, retryAfterMs: 500 });
    expect(a.calls).toEqual(['reserve', 'release rsv_a_1']);
    reason = 'no_replica';
    const second = await client.admit(request());
    if (!second.ok) throw new Error('refused');
    expect(await second.schedule(new AbortController().signal)).toMatchObject({ ok: false, reason: 'no_replica' });
    expect(a.calls).toEqual(['reserve', 'release rsv_a_1', 'reserve']);
    await second.release();
    expect(a.calls).toEqual(['reserve', 'release rsv_a_1', 'reserve', 'release rsv_a_2']);
  });

  it('withdraws a queued request when its signal fires: cancelled, the waiter aborted, the reservation released at the instance', async () => {
    const a = instance('a');
    let waiterAborted = false;
    const s = schedulerFake(
      (r) =>
        new Promise<ScheduleResult>((resolve) =>
          r.signal.addEventListener('abort', () => {
            waiterAborted = true;
            resolve({ ok: false, reason: 'cancelled', message: 'left', queueMs: 1 });
          }),
        ),
    );
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const gw = gatewayScheduler();
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gw.scheduler }));
    const admitted = await client.admit(request());
    if (!admitted.ok) throw new Error('refused');
    const gone = new AbortController();
    const pending = admitted.schedule(gone.signal);
    expect(await eventually(() => s.asked.length === 1)).toBe(true);
    gone.abort();
    expect(await pending).toMatchObject({ ok: false, reason: 'cancelled' });
    expect(await eventually(() => waiterAborted && a.calls.includes('release rsv_a_1'))).toBe(true);
    // Released at the scheduler by id too (a grant racing the cancel frees itself there).
    expect(gw.released).toEqual([s.asked[0].leaseId]);
  });

  it('moves to the next instance when the preferred one is down, and binds settle and release to the instance that reserved', async () => {
    const b = instance('b');
    const s = schedulerFake(() => granted());
    const server = await serve([createAdmissionGrpcServer(b.impl, { scheduler: s.scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [`127.0.0.1:${await freePort()}`, server.address], scheduler: gatewayScheduler().scheduler, retry: { maxAttempts: 1 } }));
    const admitted = await client.admit(request());
    if (!admitted.ok) throw new Error('refused');
    expect(admitted.reservationId).toBe('rsv_b_1');
    await admitted.schedule(new AbortController().signal);
    await admitted.settle({ usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 1 });
    await admitted.release();
    expect(b.calls).toEqual(['reserve', 'settle rsv_b_1', 'release rsv_b_1']);
  });

  it('rejects with a WeirError and gives the slot back by id when the instance dies while the request is queued', async () => {
    const a = instance('a');
    const s = schedulerFake(() => new Promise<ScheduleResult>(() => undefined));
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const gw = gatewayScheduler();
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gw.scheduler, retry: { maxAttempts: 1 } }));
    const admitted = await client.admit(request());
    if (!admitted.ok) throw new Error('refused');
    const pending = admitted.schedule(new AbortController().signal);
    expect(await eventually(() => s.asked.length === 1)).toBe(true);
    await server.close(); // the admission instance is gone, with its reservation
    await expect(pending).rejects.toMatchObject({ code: 'upstream_unavailable' });
    expect(gw.released).toEqual([s.asked[0].leaseId]);
  });

  it('answers deadline when the call outlives the request\'s deadline', async () => {
    const a = instance('a');
    const s = schedulerFake(() => new Promise<ScheduleResult>(() => undefined));
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gatewayScheduler().scheduler, acquireMarginMs: 0 }));
    const admitted = await client.admit(request(200));
    if (!admitted.ok) throw new Error('refused');
    expect(await admitted.schedule(new AbortController().signal)).toMatchObject({ ok: false, reason: 'deadline' });
    expect(await eventually(() => a.calls.includes('release rsv_a_1'))).toBe(true);
  });
});

describe('reserve only (a cache hit: a reservation without a slot)', () => {
  it('reserves at the instance with one unary call, never asks the scheduler, and settles and releases there', async () => {
    const a = instance('a');
    const s = schedulerFake(() => granted());
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: s.scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gatewayScheduler().scheduler }));
    const reserved = await client.reserve(request().reservation);
    if (!reserved.ok) throw new Error('refused');
    expect(reserved).toMatchObject({ reservationId: 'rsv_a_1', reservation: { ...ref, reservationId: 'rsv_a_1' }, rateLimits: { requests: { limit: 60, remaining: 59, resetMs: 1_000 } } });
    expect(reserved).not.toHaveProperty('schedule');
    await reserved.settle({ usage: { inputTokens: 12, outputTokens: 5 }, costNanoUsd: 7 });
    const second = await client.reserve(request().reservation);
    if (!second.ok) throw new Error('refused');
    await second.release();
    expect(a.calls).toEqual(['reserve', 'settle rsv_a_1', 'reserve', 'release rsv_a_2']);
    expect(s.asked).toHaveLength(0);
  });

  it('returns a refusal as a value with its windows', async () => {
    const a = instance('a', () => ({ ok: false, reason: 'rate_limited', message: 'slow down', retryAfterMs: 900, rateLimits: { requests: { limit: 1, remaining: 0, resetMs: 900 } } }));
    const server = await serve([createAdmissionGrpcServer(a.impl, { scheduler: schedulerFake(() => granted()).scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [server.address], scheduler: gatewayScheduler().scheduler }));
    expect(await client.reserve(request().reservation)).toEqual({ ok: false, reason: 'rate_limited', message: 'slow down', retryAfterMs: 900, rateLimits: { requests: { limit: 1, remaining: 0, resetMs: 900 } } });
  });

  it('moves to the next instance when the preferred one is down, binds settle to the instance that reserved, and Admit follows', async () => {
    const b = instance('b');
    const s = schedulerFake(() => granted());
    const server = await serve([createAdmissionGrpcServer(b.impl, { scheduler: s.scheduler })]);
    const client = track(createAdmitGrpcClient({ addresses: [`127.0.0.1:${await freePort()}`, server.address], scheduler: gatewayScheduler().scheduler, retry: { maxAttempts: 1 } }));
    const reserved = await client.reserve(request().reservation);
    if (!reserved.ok) throw new Error('refused');
    expect(reserved.reservationId).toBe('rsv_b_1');
    await reserved.settle({ usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 1 });
    // The instance that answered is now the preferred one for Admit too.
    const admitted = await client.admit(request());
    if (!admitted.ok) throw new Error('refused');
    expect(admitted.reservationId).toBe('rsv_b_2');
    await admitted.schedule(new AbortController().signal);
    expect(b.calls).toEqual(['reserve', 'settle rsv_b_1', 'reserve']);
  });

  it('fails with upstream_unavailable when no instance answers', async () => {
    const client = track(createAdmitGrpcClient({ addresses: [`127.0.0.1:${await freePort()}`], scheduler: gatewayScheduler().scheduler, retry: { maxAttempts: 1 } }));
    await expect(client.reserve(request().reservation)).rejects.toMatchObject({ code: 'upstream_unavailable' });
  });

  it('is released by the instance when the gateway\'s connection goes before the answer (nobody will settle it)', async () => {
    const released: string[] = [];
    let answer: ((r: ReserveResult) => void) | undefined;
    const impl: AdmissionService = {
      reserve: (r) => (r.requestId === 'req_warm' ? Promise.resolve({ ok: true, reservationId: 'rsv_warm' }) : new Promise<ReserveResult>((resolve) => (answer = resolve))),
      settle: async () => undefined,
      release: async (id) => void released.push(id),
    };
    const server = await serve([createAdmissionGrpcServer(impl, { scheduler: schedulerFake(() => granted()).scheduler })]);
    const client = createAdmitGrpcClient({ addresses: [server.address], scheduler: gatewayScheduler().scheduler, retry: { maxAttempts: 1 } });
    expect(await client.reserve({ ...request().reservation, requestId: 'req_warm' })).toMatchObject({ ok: true });
    const pending = client.reserve(request().reservation);
    expect(await eventually(() => answer !== undefined)).toBe(true);
    client.close(); // the gateway is gone (its multiplexed stream with it), well inside the call's deadline
    await expect(pending).rejects.toBeDefined();
    // Let the server see the stream end before the reservation completes.
    await new Promise((r) => setTimeout(r, 100));
    answer?.({ ok: true, reservationId: 'rsv_late' });
    expect(await eventually(() => released.length > 0)).toBe(true);
    expect(released).toEqual(['rsv_late']);
  });
});
