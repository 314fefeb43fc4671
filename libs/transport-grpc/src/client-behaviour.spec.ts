import type * as grpc from '@grpc/grpc-js';
import { type AdmissionService, type RouteResult, type RouterService, type SchedulerService, WeirError, isWeirError } from '@weir/core';
import { contractCallers, reservationRequest } from '@weir/testing';
import {
  createAdmissionGrpcClient,
  createAdmissionGrpcServer,
  createRouterGrpcClient,
  createRouterGrpcServer,
  createSchedulerGrpcClient,
  createSchedulerGrpcServer,
} from './index';
import { serve, stopEverythingAfterEach, track } from './test-support';

stopEverythingAfterEach();

const notFound: RouteResult = { ok: false, reason: 'model_not_found', message: 'no' };
const fastRetry = { maxAttempts: 4, initialBackoffMs: 10, maxBackoffMs: 40 };
const usage = { usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 1 };

/** An admission whose every call fails with `shutting_down` (UNAVAILABLE) `failures` times, counting calls. */
function flakyAdmission(failures: number): AdmissionService & { calls: Record<string, number> } {
  const calls: Record<string, number> = { reserve: 0, settle: 0, release: 0 };
  const maybeFail = (name: string) => {
    calls[name]++;
    if (calls[name] <= failures) throw new WeirError('shutting_down', 'restarting', { retryable: true });
  };
  return {
    calls,
    async reserve() {
      maybeFail('reserve');
      return { ok: true, reservationId: 'rsv_1' };
    },
    async settle() {
      maybeFail('settle');
    },
    async release() {
      maybeFail('release');
    },
  };
}

describe('deadlines', () => {
  it('fails a unary call that outlives its deadline with upstream_timeout, without retrying', async () => {
    let calls = 0;
    const hanging: RouterService = {
      resolve: () => {
        calls++;
        return new Promise<RouteResult>(() => undefined);
      },
      listAliases: async () => [],
    };
    const server = await serve([createRouterGrpcServer(hanging)]);
    const client = track(createRouterGrpcClient({ address: server.address, deadlineMs: 100, retry: fastRetry }));
    // Connect first (a quick call), so the 100 ms deadline is spent waiting on the server, not
    // on a first connection that a loaded machine may set up slowly.
    await client.listAliases(contractCallers.acme);
    const started = performance.now();
    const error = await client.resolve(contractCallers.acme, 'tiny', 'k').catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    expect(error).toMatchObject({ code: 'upstream_timeout', retryable: true });
    expect(elapsed).toBeGreaterThanOrEqual(90);
    expect(elapsed).toBeLessThan(5_000);
    expect(calls).toBe(1);
  });

  it("gives Acquire the request's own deadline plus the margin, and cancels the server-side wait", async () => {
    let serverSignal: AbortSignal | undefined;
    const stuck: SchedulerService = {
      acquire(request) {
        serverSignal = request.signal;
        return new Promise(() => undefined); // ignores its deadline: only the call deadline ends it
      },
    };
    const server = await serve([createSchedulerGrpcServer(stuck)]);
    const client = track(createSchedulerGrpcClient({ address: server.address, deadlineMs: 50, acquireMarginMs: 100 }));
    const started = performance.now();
    const result = await client.acquire({
      caller: contractCallers.acme,
      revisionId: 'r',
      tokens: 1,
      deadlineAt: performance.now() + 150,
      signal: new AbortController().signal,
    });
    const elapsed = performance.now() - started;
    expect(result).toMatchObject({ ok: false, reason: 'deadline' });
    expect(elapsed).toBeGreaterThanOrEqual(240);
    expect(elapsed).toBeLessThan(1_500);
    for (let i = 0; i < 50 && !serverSignal?.aborted; i++) await new Promise((r) => setTimeout(r, 10));
    expect(serverSignal?.aborted).toBe(true);
  });
});

describe('retries', () => {
  it('retries idempotent calls (Settle, Release) on UNAVAILABLE and never Reserve', async () => {
    const impl = flakyAdmission(2);
    const server = await serve([createAdmissionGrpcServer(impl)]);
    const client = track(createAdmissionGrpcClient({ address: server.address, retry: fastRetry }));
    await expect(client.settle('rsv_1', usage)).resolves.toBeUndefined();
    await expect(client.release('rsv_1')).resolves.toBeUndefined();
    const error = await client.reserve(reservationRequest()).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'shutting_down' });
    expect(impl.calls).toEqual({ reserve: 1, settle: 3, release: 3 });
  });

  it('gives up after maxAttempts with the last error', async () => {
    const impl = flakyAdmission(100);
    const server = await serve([createAdmissionGrpcServer(impl)]);
    const client = track(createAdmissionGrpcClient({ address: server.address, retry: { ...fastRetry, maxAttempts: 3 } }));
    const error = await client.settle('rsv_1', usage).catch((e: unknown) => e);
    expect(isWeirError(error) && error.code).toBe('shutting_down');
    expect(impl.calls.settle).toBe(3);
  });

  it('rides out a server restart for Resolve but not for Reserve', async () => {
    const router: RouterService = { resolve: async () => notFound, listAliases: async () => [] };
    const admission = flakyAdmission(0);
    const services = () => [createRouterGrpcServer(router), createAdmissionGrpcServer(admission)];
    const first = await serve(services());
    const port = first.port;
    const options = { address: first.address, retry: { maxAttempts: 6, initialBackoffMs: 50, maxBackoffMs: 200 } };
    const routerClient = track(createRouterGrpcClient(options));
    const admissionClient = track(createAdmissionGrpcClient(options));
    expect(await routerClient.resolve(contractCallers.acme, 'x', 'k')).toEqual(notFound);
    await first.close();
    await new Promise((r) => setTimeout(r, 30)); // let the channel see the connection drop

    const restart = new Promise<void>((resolve) =>
      setTimeout(async () => {
        await serve(services(), port);
        resolve();
      }, 150),
    );
    const [resolved, reserved] = await Promise.all([
      routerClient.resolve(contractCallers.acme, 'x', 'k'),
      admissionClient.reserve(reservationRequest()).catch((e: unknown) => e),
    ]);
    await restart;
    expect(resolved).toEqual(notFound);
    expect(reserved).toMatchObject({ code: 'upstream_unavailable' });
    expect(((reserved as WeirError).cause as grpc.ServiceError).code).toBe(14);
    expect(admission.calls.reserve).toBe(0);
  });
});
