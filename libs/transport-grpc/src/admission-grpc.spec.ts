/**
 * `weir.admission.v1` over loopback: every field of a reservation request reaches the server,
 * and the rate-limit windows come back on reservations and rejections alike.
 */
import type { AdmissionService, ReservationRequest, ReserveResult } from '@weir/core';
import { createAdmissionFailoverClient, createAdmissionGrpcClient, createAdmissionGrpcServer, startGrpcServer } from './index';

const request: ReservationRequest = {
  caller: { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' },
  requestId: 'req_1',
  generationId: 'gen_1',
  expiresAtMs: Date.UTC(2026, 10, 30, 12, 1, 0),
  inputTokens: 12,
  maxOutputTokens: 34,
  worstCaseCostNanoUsd: 9_007_199_254,
};

async function loopback(answer: ReserveResult) {
  const seen: ReservationRequest[] = [];
  const impl: AdmissionService = {
    reserve: async (r) => (seen.push(r), answer),
    settle: async () => undefined,
    release: async () => undefined,
  };
  const server = await startGrpcServer({ services: [createAdmissionGrpcServer(impl)] });
  const client = createAdmissionGrpcClient({ address: server.address });
  try {
    return { result: await client.reserve(request), seen };
  } finally {
    client.close();
    await server.close();
  }
}

describe('admission over gRPC', () => {
  it('carries the generation id, the expiry and every count, and returns the windows of a reservation', async () => {
    const rateLimits = { requests: { limit: 60, remaining: 59, resetMs: 1_000 }, tokens: { limit: 10_000, remaining: 9_954, resetMs: 276 } };
    const { result, seen } = await loopback({ ok: true, reservationId: 'rsv_1', rateLimits });
    expect(seen).toEqual([request]);
    expect(result).toEqual({ ok: true, reservationId: 'rsv_1', rateLimits });
  });

  it('returns the windows and the retry hint of a rejection, and omits absent windows', async () => {
    const { result } = await loopback({ ok: false, reason: 'rate_limited', message: 'slow down', retryAfterMs: 1_500, rateLimits: { tokens: { limit: 100, remaining: 0, resetMs: 60_000 } } });
    expect(result).toEqual({ ok: false, reason: 'rate_limited', message: 'slow down', retryAfterMs: 1_500, rateLimits: { tokens: { limit: 100, remaining: 0, resetMs: 60_000 } } });
    const budget = await loopback({ ok: false, reason: 'budget_exhausted', message: 'spent' });
    expect(budget.result).toEqual({ ok: false, reason: 'budget_exhausted', message: 'spent' });
  });
});

describe('a reservation whose caller gave up', () => {
  it('is released by the server when the call was cancelled before the answer (the client hit its deadline)', async () => {
    const released: string[] = [];
    let answer: ((r: ReserveResult) => void) | undefined;
    const impl: AdmissionService = {
      // The first call (warm-up) answers at once; the next one waits past the client's deadline.
      reserve: (r) =>
        r.requestId === 'req_warm' ? Promise.resolve({ ok: true, reservationId: 'rsv_warm' }) : new Promise<ReserveResult>((resolve) => (answer = resolve)),
      settle: async () => undefined,
      release: async (id) => void released.push(id),
    };
    const server = await startGrpcServer({ services: [createAdmissionGrpcServer(impl)] });
    const client = createAdmissionGrpcClient({ address: server.address, deadlineMs: 300 });
    try {
      // Connect first, so the deadline is spent waiting on the server, not on a first connection
      // that a loaded machine may set up slowly (then the server would never see the call).
      expect(await client.reserve({ ...request, requestId: 'req_warm' })).toMatchObject({ ok: true });
      await expect(client.reserve(request)).rejects.toMatchObject({ code: 'upstream_timeout' });
      expect(answer).toBeDefined();
      // The server finishes the reservation well after the client's deadline. (Its own view of
      // the deadline is later by the request's transit, a loaded machine's milliseconds: an
      // answer inside that window reaches a caller that is gone, and the reservation is held
      // until it expires.)
      await new Promise((r) => setTimeout(r, 1_000));
      answer?.({ ok: true, reservationId: 'rsv_late' });
      const until = Date.now() + 5_000;
      while (released.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      expect(released).toEqual(['rsv_late']);
    } finally {
      client.close();
      await server.close();
    }
  });
});

describe('admission failover over several instances', () => {
  it('moves reserve, settle and release to the next instance when one is down, and sticks to the one that answers', async () => {
    const calls: string[] = [];
    const impl = (name: string): AdmissionService => ({
      reserve: async () => (calls.push(`${name}:reserve`), { ok: true, reservationId: `rsv_${name}` }),
      settle: async () => void calls.push(`${name}:settle`),
      release: async () => void calls.push(`${name}:release`),
    });
    const a = await startGrpcServer({ services: [createAdmissionGrpcServer(impl('a'))] });
    const b = await startGrpcServer({ services: [createAdmissionGrpcServer(impl('b'))] });
    const client = createAdmissionFailoverClient({ addresses: [a.address, b.address], retry: { maxAttempts: 1 } });
    try {
      expect(await client.reserve(request)).toEqual({ ok: true, reservationId: 'rsv_a' });
      await a.close();
      expect(await client.reserve(request)).toEqual({ ok: true, reservationId: 'rsv_b' });
      await client.settle('rsv_a', { usage: { inputTokens: 1, outputTokens: 2 }, costNanoUsd: 3 });
      await client.release('rsv_b');
      expect(calls).toEqual(['a:reserve', 'b:reserve', 'b:settle', 'b:release']);
      await b.close();
      await expect(client.reserve(request)).rejects.toMatchObject({ code: 'upstream_unavailable', retryAfterMs: 1_000, message: 'the admission service is unavailable; retry shortly' });
    } finally {
      client.close();
      await a.close().catch(() => undefined);
      await b.close().catch(() => undefined);
    }
  });
});
