/**
 * The exact cache in the split topology (issue 15 item 1; docs/caching.md): the real app and
 * pipeline with admission on budget leases behind its gRPC server (whose `Admit` acquires from
 * the scheduler's gRPC server), the scheduler and the relay behind theirs, and the gateway's
 * gRPC clients over the multiplexed transport — as `apps/gateway` wires them. A hit is admitted
 * by one `Reserve` (no `Admit`, no scheduler slot, no relay call), is refused like any request
 * over a limit, is recorded as one usage row with `cacheHit` at the policy's price, and is
 * settled at the instance that reserved; a miss, and a tenant without a cache policy, still make
 * exactly one `Admit` and no `Reserve`.
 */
import { createInMemoryLeaseStore, createLeasedAdmission, type LeasedAdmission } from '@weir/admission';
import { createMemoryExactTier, createResponseCache, type MemoryExactTier } from '@weir/cache';
import type { AdmissionService, EngineAdapter, EngineEvent, EngineRequest, PlatformConfig, SchedulerService, TenantCachePolicy, UsageRecord } from '@weir/core';
import { priceUsage } from '@weir/ledger';
import type { Relay } from '@weir/streaming';
import {
  type GrpcServiceBinding,
  createAdmissionGrpcServer,
  createAdmitGrpcClient,
  createRelayGrpcClient,
  createRelayGrpcServer,
  createSchedulerGrpcClient,
  createSchedulerGrpcServer,
  startGrpcServer,
} from '@weir/transport-grpc';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** An engine that streams `w0 … w4` and counts its generations. */
function countingEngine(): EngineAdapter & { started: number } {
  const engine = {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    started: 0,
    async countInputTokens() {
      return 4;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      engine.started++;
      let n = 0;
      for (; n < Math.min(5, request.maxOutputTokens); n++) yield { type: 'delta', text: `w${n} `, tokens: 1 };
      yield { type: 'end', reason: n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 4, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
  return engine;
}

const POLICY: TenantCachePolicy = { exact: { enabled: true, ttlMs: 60_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.25 };
const PRICING = { inputPerMTok: 2_000, outputPerMTok: 8_000, cachedInputPerMTok: 1_000 };

/** Tenant `t` with the cache policy (and `limits` added), tenant `u` without one. */
function configWith(limits: Record<string, number> = {}): PlatformConfig {
  const base = twoTenantConfig(fakeRevision(PRICING));
  return { ...base, tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, cache: POLICY, limits: { ...t.limits, monthlyBudgetUsd: 10, ...limits } } : t)) };
}

/** Counts the calls of each method a binding serves (plain and multiplexed calls alike). */
function counting(binding: GrpcServiceBinding, calls: Record<string, number>): GrpcServiceBinding {
  const handlers = Object.fromEntries(
    Object.entries(binding.handlers).map(([name, handler]) => [
      name,
      (...args: unknown[]) => {
        calls[name] = (calls[name] ?? 0) + 1;
        return (handler as (...a: unknown[]) => unknown)(...args);
      },
    ]),
  );
  return { ...binding, handlers: handlers as GrpcServiceBinding['handlers'] };
}

let harness: TestGateway;
let engine: ReturnType<typeof countingEngine>;
let admission: LeasedAdmission;
let tier: MemoryExactTier;
let records: UsageRecord[];
/** gRPC calls the admission instance served, by method (`admit`, `reserve`, `settle`, `release`). */
let calls: Record<string, number>;
/** Generations the gateway handed to the relay (over gRPC). */
let relayed: number;
const stops: Array<() => unknown> = [];

async function start(config: PlatformConfig) {
  engine = countingEngine();
  records = [];
  calls = {};
  relayed = 0;
  admission = createLeasedAdmission({ tenants: config.tenants, mode: 'shared' }, { store: createInMemoryLeaseStore() });
  tier = createMemoryExactTier();
  // The split as `apps/gateway`, `apps/admission` and `apps/scheduler` wire it, on loopback.
  const admitVia = async (impl: AdmissionService, scheduler: SchedulerService) => {
    const schedulerServer = await startGrpcServer({ services: [createSchedulerGrpcServer(scheduler)] });
    const admissionsScheduler = createSchedulerGrpcClient({ address: schedulerServer.address });
    const admissionServer = await startGrpcServer({ services: [counting(createAdmissionGrpcServer(impl, { scheduler: admissionsScheduler }), calls)] });
    const gatewaysScheduler = createSchedulerGrpcClient({ address: schedulerServer.address });
    const admit = createAdmitGrpcClient({ addresses: [admissionServer.address], scheduler: gatewaysScheduler });
    stops.push(
      () => admit.close(),
      () => gatewaysScheduler.close(),
      () => admissionServer.close(),
      () => admissionsScheduler.close(),
      () => schedulerServer.close(),
    );
    return { admit, scheduler: gatewaysScheduler };
  };
  const relayVia = async (relay: Relay): Promise<Relay> => {
    const server = await startGrpcServer({ services: [createRelayGrpcServer(relay)] });
    const client = createRelayGrpcClient({ address: server.address });
    stops.push(
      () => client.close(),
      () => server.close(),
    );
    return { start: (job) => (relayed++, client.start(job)) };
  };
  harness = await startTestGateway({ config, engine, admission, records, admitVia, relayVia, cache: createResponseCache({ tiers: [tier] }) });
}

afterEach(async () => {
  await harness?.close();
  for (const stop of stops.splice(0)) await stop();
  await admission?.stop({ returnLeases: false });
});

async function until(check: () => boolean, ms = 3_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'fake', messages: [{ role: 'user', content: 'hello there' }], temperature: 0, max_tokens: 8, ...extra });

/** The tenant's month budget lease as admission holds it. */
const tenantMonth = () => admission.snapshot().budgetLeases.find((l) => l.key.scope === 'tenant:t' && l.key.period === 'month');

describe('the exact cache in the split (admission, scheduler and relay over gRPC)', () => {
  it('a hit is one Reserve — no Admit, no relay, no engine — recorded with cache_hit at the policy price and settled at the instance', async () => {
    await start(configWith());
    const first = await harness.post('/v1/chat/completions', chat());
    expect(first.headers.get('x-weir-cache')).toBe('miss');
    const a = (await first.json()) as { choices: unknown; usage: unknown };
    await until(() => tier.stats().entries === 1 && records.length === 1 && admission.snapshot().held === 0);
    // The miss: exactly one Admit round trip, as before the cache.
    expect(calls).toEqual({ admit: 1, settle: 1 });
    expect(relayed).toBe(1);

    const second = await harness.post('/v1/chat/completions', chat());
    expect(second.status).toBe(200);
    expect(second.headers.get('x-weir-cache')).toBe('hit');
    expect(second.headers.get('x-weir-cache-tier')).toBe('exact');
    const b = (await second.json()) as typeof a;
    expect(b.choices).toEqual(a.choices);
    expect(b.usage).toEqual(a.usage);
    await until(() => records.length === 2 && (calls.settle ?? 0) === 2);
    expect(calls).toEqual({ admit: 1, reserve: 1, settle: 2 });
    expect(relayed).toBe(1);
    expect(engine.started).toBe(1);

    const [miss, hit] = records;
    expect(miss.cacheHit).toBeUndefined();
    expect(hit).toMatchObject({ cacheHit: 'exact', status: 'completed', inputTokens: miss.inputTokens, outputTokens: miss.outputTokens });
    const full = priceUsage(PRICING, { inputTokens: miss.inputTokens, outputTokens: miss.outputTokens, cachedInputTokens: 0 });
    expect(hit.costNanoUsd).toBe(Math.round(full * 0.25));
    // The hit's row names the reservation the ledger settles against (leases carried over gRPC).
    expect(hit.reservation?.leaseIds.length).toBeGreaterThan(0);
    // Nothing held, nothing in flight; the tenant's month lease was charged the miss and the hit's price.
    await until(() => admission.snapshot().held === 0);
    expect(admission.snapshot().inFlight['tenant:t'] ?? 0).toBe(0);
    expect(tenantMonth()).toMatchObject({ settledNano: miss.costNanoUsd + hit.costNanoUsd, inFlightNano: 0 });
  });

  it('a hit is refused like any request: over the tenant\'s request limit it is a 429, nothing recorded, nothing held', async () => {
    await start(configWith({ requestsPerMinute: 2 }));
    await (await harness.post('/v1/chat/completions', chat())).json();
    await until(() => tier.stats().entries === 1 && records.length === 1);
    const hit = await harness.post('/v1/chat/completions', chat());
    expect(hit.headers.get('x-weir-cache')).toBe('hit');
    await hit.json();
    const refused = await harness.post('/v1/chat/completions', chat());
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    await until(() => records.length === 2 && admission.snapshot().held === 0);
    await new Promise((r) => setTimeout(r, 30));
    expect(records.map((r) => r.cacheHit ?? null)).toEqual([null, 'exact']);
    expect(calls).toEqual({ admit: 1, reserve: 2, settle: 2 });
    expect(relayed).toBe(1);
    expect(admission.snapshot().inFlight['tenant:t'] ?? 0).toBe(0);
  });

  it('a streamed hit answers the whole stream from the cache', async () => {
    await start(configWith());
    const body = chat({ stream: true, stream_options: { include_usage: true } });
    const miss = await (await harness.post('/v1/chat/completions', body)).text();
    await until(() => tier.stats().entries === 1);
    const res = await harness.post('/v1/chat/completions', body);
    expect(res.headers.get('x-weir-cache')).toBe('hit');
    const hit = await res.text();
    // Ids, times, the cost (the hit is billed its policy price) and Weir's overhead differ by design.
    const strip = (sse: string) =>
      sse
        .replace(/"id":"[^"]+"/g, '"id":""')
        .replace(/"created":\d+/g, '"created":0')
        .replace(/"cost_usd":[0-9.e-]+/g, '"cost_usd":0')
        .replace(/"overhead_ms":[0-9.e-]+/g, '"overhead_ms":0');
    expect(strip(hit)).toBe(strip(miss));
    expect(hit.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(relayed).toBe(1);
  });

  it('a tenant without a cache policy makes exactly one Admit per request and never a Reserve', async () => {
    await start(configWith());
    for (let i = 0; i < 2; i++) {
      const res = await harness.post('/v1/chat/completions', chat(), {}, harness.otherKey.plaintext);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-weir-cache')).toBeNull();
      await res.json();
    }
    await until(() => records.length === 2 && (calls.settle ?? 0) === 2);
    expect(calls).toEqual({ admit: 2, settle: 2 });
    expect(relayed).toBe(2);
  });
});
