/**
 * Use cases in the split topology (issue 16 item 7): the real app and pipeline with admission on
 * budget leases behind its gRPC server (whose `Admit` acquires from the scheduler's gRPC server),
 * the scheduler and the relay behind theirs, and the gateway's gRPC clients — as `apps/gateway`,
 * `apps/admission` and `apps/scheduler` wire them. The use case crosses the `Admit` wire, so the
 * admission service holds the use case's scope; the reservation's `use_case` comes back and rides
 * the relay's job to the usage record, so the ledger charges the use case's budget rows. A
 * session id (`x-weir-session-id`) crosses the same wire to the admission service's session budgets.
 */
import { createInMemoryLeaseStore, createLeasedAdmission, createSessionBudgets, type LeasedAdmission } from '@weir/admission';
import type { AdmissionService, EngineAdapter, EngineEvent, EngineRequest, PlatformConfig, SchedulerService, UsageRecord, UseCasePolicy } from '@weir/core';
import type { Relay } from '@weir/streaming';
import { createAdmissionGrpcServer, createAdmitGrpcClient, createRelayGrpcClient, createRelayGrpcServer, createSchedulerGrpcClient, createSchedulerGrpcServer, startGrpcServer } from '@weir/transport-grpc';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** An engine that streams `w0 … w4` (4 input tokens). */
function fiveWords(): EngineAdapter {
  return {
    kind: 'fake',
    capacity: { slots: 4, contextTokens: 64 },
    async countInputTokens() {
      return 4;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      let n = 0;
      for (; n < Math.min(5, request.maxOutputTokens); n++) yield { type: 'delta', text: `w${n} `, tokens: 1 };
      yield { type: 'end', reason: n >= request.maxOutputTokens ? 'length' : 'stop', usage: { inputTokens: 4, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
}

const MAIN = { ...fakeRevision(), id: 'main@1' };
const PINNED = { ...fakeRevision(), id: 'pinned@1' };
const USE_CASES: UseCasePolicy[] = [
  // Worst case of one request: 4 input + 8 output tokens at $1/Mtok = $0.000012; it settles at 4 + 5.
  { name: 'capped', model: 'chat', limits: { monthlyBudgetUsd: 0.00002 } },
  { name: 'pinned', model: 'chat', pin: 'pinned@1', limits: {} },
];

function config(): PlatformConfig {
  const base = twoTenantConfig(MAIN);
  return {
    ...base,
    revisions: [MAIN, PINNED],
    aliases: [{ name: 'chat', targets: [{ revision: 'main@1', weight: 1 }] }],
    // App `a` caps sessions at 24 tokens: a request holds 4 + 8 = 12 and settles at 4 + 5 = 9.
    tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, useCases: USE_CASES, apps: [{ id: 'a', name: 'A', limits: { sessionMaxTokens: 24 } }] } : t)),
  };
}

let harness: TestGateway;
let admission: LeasedAdmission;
let records: UsageRecord[];
const stops: Array<() => unknown> = [];

async function start() {
  const c = config();
  records = [];
  admission = createLeasedAdmission({ tenants: c.tenants, mode: 'shared' }, { store: createInMemoryLeaseStore() });
  // The admission service wraps its engine in session budgets (apps/admission's main).
  const served = createSessionBudgets({ tenants: c.tenants }).wrap(admission);
  const admitVia = async (impl: AdmissionService, scheduler: SchedulerService) => {
    const schedulerServer = await startGrpcServer({ services: [createSchedulerGrpcServer(scheduler)] });
    const admissionsScheduler = createSchedulerGrpcClient({ address: schedulerServer.address });
    const admissionServer = await startGrpcServer({ services: [createAdmissionGrpcServer(impl, { scheduler: admissionsScheduler })] });
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
    return client;
  };
  harness = await startTestGateway({ config: c, engine: fiveWords(), admission: served, records, admitVia, relayVia });
}

afterEach(async () => {
  await harness?.close();
  for (const stop of stops.splice(0)) await stop();
  await admission?.stop({ returnLeases: false });
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies are read loosely
const json = async (res: Response): Promise<any> => res.json();
const body = (useCase: string) => ({ use_case: useCase, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 8 });

async function until(check: () => boolean, ms = 3_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('use cases in the split (admission, scheduler and relay over gRPC)', () => {
  it('a body without a model is routed by its use case’s chain, and the reservation’s use case reaches the usage record', async () => {
    await start();
    const res = await harness.post('/v1/responses', body('pinned'));
    expect(res.status).toBe(200);
    expect((await json(res)).model_used).toBe('pinned@1');
    await until(() => records.length === 1);
    expect(records[0]).toMatchObject({ useCase: 'pinned', modelRevision: 'pinned@1', reservation: { useCase: 'pinned' } });
    // The admission service held the use case's scope: its in-flight count came and went.
    await until(() => admission.snapshot().held === 0);
    expect(admission.snapshot().inFlight).toMatchObject({ 'tenant:t': 0, 'app:t/a': 0, 'usecase:t/pinned': 0 });
  });

  it('a spent use-case budget is a 429 naming the use case, decided by the admission service, while the tenant’s other use case runs', async () => {
    await start();
    expect((await harness.post('/v1/responses', body('capped'))).status).toBe(200);
    await until(() => admission.snapshot().held === 0);
    const refused = await harness.post('/v1/responses', body('capped'));
    expect(refused.status).toBe(429);
    const error = (await json(refused)).error;
    expect(error.code).toBe('budget_exhausted');
    expect(error.message).toMatch(/'capped' use case's monthly budget of \$0\.00002 is exhausted/);
    expect((await harness.post('/v1/responses', body('pinned'))).status).toBe(200);
    await until(() => records.length === 2);
    expect(records.map((r) => r.reservation?.useCase)).toEqual(['capped', 'pinned']);
    // The use case's month lease at the admission service: the settled cost counted under it.
    const lease = admission.snapshot().budgetLeases.find((l) => l.key.scope === 'usecase:t/capped' && l.key.period === 'month');
    expect(lease?.settledNano).toBe(9_000);
  });

  it('a session id crosses the Admit wire: the admission service caps the session (429 naming it) while another session runs', async () => {
    await start();
    const run = { 'x-weir-session-id': 'run-1' };
    expect((await harness.post('/v1/responses', body('pinned'), run)).status).toBe(200);
    await until(() => admission.snapshot().held === 0);
    expect((await harness.post('/v1/responses', body('pinned'), run)).status).toBe(200);
    await until(() => admission.snapshot().held === 0);
    const refused = await harness.post('/v1/responses', body('pinned'), run);
    expect(refused.status).toBe(429);
    expect((await json(refused)).error.message).toMatch(/^Session 'run-1' has reached its cap of 24 tokens: 18 used/);
    expect((await harness.post('/v1/responses', body('pinned'), { 'x-weir-session-id': 'run-2' })).status).toBe(200);
  });
});
