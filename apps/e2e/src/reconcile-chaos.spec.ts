/**
 * Reconciliation after a chaos run on the split topology (issue 4, deliverable 9): the ledger's
 * totals equal an independent count — the engines' own token counters and the usage event
 * stream — times the prices, exactly.
 *
 * Fresh engine replicas, a private nats-server, a private namespace and a private database; the
 * control plane runs, so the configuration every service applies is the store's.
 *
 * Phase A (every engine replica survives, so their counters cover exactly this phase):
 * normal requests, client cancels mid-stream, deadline cut-offs, retries with the same
 * request_id, and the streaming relay killed mid-stream (the gateway records what it relayed,
 * marked `uncertain`). Reconciliation (the library) settles the uncertain row from the engine's
 * per-generation count, and then the ledger equals the engines' counters, the usage stream and
 * tokens × prices.
 *
 * Phase B: an engine replica killed with SIGKILL while it streams. A killed replica loses its
 * counters, so this phase is excluded from the engine-counter comparison; it is still compared
 * with the usage stream and the prices, by the operator command (`npm run reconcile`) run once
 * through child_process over both phases — with WEIR_CONFIG naming a file that does not exist:
 * prices, budgets and replicas come from the control plane's store (issue 13: the command read
 * the file and could not settle what the killed relay left). After it nothing is held past its
 * expiry (reservations, leases) and the tenant is served.
 */
import { sql } from 'kysely';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { createAdmission } from '@weir/admission';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { connectNats, natsNames } from '@weir/messaging-nats';
import { fetchEngineCounters, loadReconcileConfig, lookupGenerationUsage, type ReconciliationReport, runReconciliation } from '@weir/reconcile';
import { createServiceTlsAgent, type ServiceTls } from '@weir/service-tls';
import { fetch as undiciFetch } from 'undici';
import {
  createPgAdmissionStore,
  createPgLeaseStore,
  createReconcileQueries,
  createTemporaryPostgresDatabase,
  openDatabase,
  type TemporaryPostgresDatabase,
  type WeirDatabase,
} from '@weir/store-pg';
import { type PrivateNats, startPrivateNats, tinyModelPath, uniqueTag } from '@weir/testing';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';
import { readSse } from './support/sse';

jest.setTimeout(300_000);

const REPO_ROOT = path.resolve(__dirname, '../../..');
const namespace = `rc-${uniqueTag().toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 20)}`;
let nats: PrivateNats;
let pg: TemporaryPostgresDatabase;
let ledger: WeirDatabase;
let topology: SplitTopology;
let workDir: string;

beforeAll(async () => {
  nats = await startPrivateNats();
  pg = await createTemporaryPostgresDatabase();
  workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-reconcile-chaos-'));
  topology = await startSplitTopology({
    configText: E2E_CONFIG,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl: pg.url,
    natsUrl: nats.url,
    natsNamespace: namespace,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY },
    // The configuration in the control plane's store, as in production: reconciliation reads it there.
    controlPlane: { adminToken: `wa_rcchaos1_${'R'.repeat(43)}`, heartbeatMs: 1_000 },
  });
  ledger = await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 2 });
});

afterAll(async () => {
  try {
    await topology?.stop();
  } finally {
    await ledger?.close();
    await pg?.drop();
    await nats?.dispose();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }
});

const headers = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };
const gateway = (i = 0) => topology.gateways[i % topology.gateways.length].url;

interface EndData {
  finish_reason: string;
  usage: { input_tokens: number; output_tokens: number };
}

/** A non-stream generation; returns its status and body. */
async function generate(body: Record<string, unknown>, gw = 0): Promise<{ status: number; body: { generation_id?: string; finish_reason?: string } }> {
  const res = await fetch(`${gateway(gw)}/v1/generations`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 12, temperature: 0, ...body }),
  });
  return { status: res.status, body: (await res.json()) as never };
}

/**
 * A streamed generation that `onDelta` may interrupt (by aborting, or by a fault); returns
 * the generation id (from `start`) and the `end` event's data when one came.
 */
async function stream(body: Record<string, unknown>, onDelta?: (n: number, abort: () => void) => void, gw = 0): Promise<{ generationId: string; end?: EndData }> {
  const abort = new AbortController();
  const res = await fetch(`${gateway(gw)}/v1/generations`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model_alias: 'tiny-stories-slow', input: 'Lily and Tom', max_output_tokens: 200, temperature: 0, stream: true, ...body }),
    signal: abort.signal,
  });
  expect(res.status).toBe(200);
  let deltas = 0;
  let aborted = false;
  const { events } = await readSse(res, {
    abort,
    stopAfter: (e) => {
      if (e.event === 'delta') onDelta?.(++deltas, () => (aborted = true));
      return aborted;
    },
  });
  const start = JSON.parse(events[0].data) as { generation_id: string };
  const end = events.find((e) => e.event === 'end');
  return { generationId: start.generation_id, end: end ? (JSON.parse(end.data) as EndData) : undefined };
}

async function ledgerRows(ids: readonly string[], timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const rows = await ledger.db.selectFrom('usage_ledger').selectAll().where('generation_id', 'in', ids).execute();
    if (rows.length >= new Set(ids).size) return rows;
    if (Date.now() > until) throw new Error(`only ${rows.length} of ${new Set(ids).size} generations reached the ledger`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until no engine replica is generating (so every counter is final). */
async function enginesIdle(timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const stats = await Promise.all(
      topology.engines.filter((e) => e.process.alive()).map(async (e) => (await (await topology.serviceFetch(`${e.url}/stats`)).json()) as { activeSequences: number; inUse: number }),
    );
    if (stats.every((s) => s.activeSequences === 0 && s.inUse === 0)) return;
    if (Date.now() > until) throw new Error('engines still busy');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until the scheduler has seen every replica answer (as the split fault tests do). */
async function waitForReplicasUp(timeoutMs = 60_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const text = await (await fetch(`${topology.opsUrls.get('scheduler')}/metrics`)).text();
    const up = (id: string) => text.split('\n').some((l) => l.startsWith('weir_replica_up{') && l.includes(`replica="${id}"`) && l.endsWith(' 1'));
    if (topology.engines.every((e) => up(e.replicaId))) return;
    if (Date.now() > until) throw new Error('replicas never all reported up by the scheduler');
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Prices, budgets and replicas as the control plane stored them (what every service runs). */
async function reconcileOptions() {
  const { config, prices } = await loadReconcileConfig(createReconcileQueries(ledger.db));
  return {
    tenants: config.tenants,
    pricing: prices,
    enginesByRevision: new Map(config.revisions.map((r) => [r.id, (r.replicas ?? []).map((x) => ({ replicaId: x.id, baseUrl: x.baseUrl }))])),
  };
}

it('after cancels, deadlines, retries, a lost relay and a killed engine, the ledger equals the engines’ counters and the usage stream, times the prices', async () => {
  await waitForReplicasUp();
  const phaseAStart = new Date(Date.now() - 1_000);
  const ids: string[] = [];

  // Normal requests, over both gateways.
  const normal = await Promise.all(Array.from({ length: 6 }, (_, i) => generate({ max_output_tokens: 8 + i }, i)));
  expect(normal.map((r) => r.status)).toEqual(Array(6).fill(200));
  ids.push(...normal.map((r) => r.body.generation_id as string));

  // Client cancels mid-stream (the gateway stops the engine after the grace period and bills what it produced).
  const cancels = await Promise.all([3, 5].map((n, i) => stream({}, (d, abort) => d === n && abort(), i)));
  ids.push(...cancels.map((c) => c.generationId));

  // Deadline cut-offs: the slow revision makes ~25 tokens/s, far fewer than 200 in 500 ms.
  const deadlines = await Promise.all([500, 700].map((ms, i) => stream({ deadline_ms: ms }, undefined, i)));
  expect(deadlines.map((d) => d.end?.finish_reason)).toEqual(['deadline', 'deadline']);
  ids.push(...deadlines.map((d) => d.generationId));

  // Retries with the same request_id (a client that timed out and sent it again), on both gateways.
  const retried: { requestId: string; first: string; second: string }[] = [];
  for (const requestId of [`chaos-${namespace}-1`, `chaos-${namespace}-2`]) {
    const first = await generate({ request_id: requestId }, 0);
    const second = await generate({ request_id: requestId }, 1);
    expect([first.status, second.status]).toEqual([200, 200]);
    retried.push({ requestId, first: first.body.generation_id as string, second: second.body.generation_id as string });
    ids.push(first.body.generation_id as string, second.body.generation_id as string);
  }

  // The relay killed mid-stream: nothing else runs, so only this generation is lost with it.
  await enginesIdle();
  const lost = await stream({}, (d) => d === 4 && topology.processes.get('relay')?.signal('SIGKILL'));
  expect(lost.end?.finish_reason).toBe('error');
  ids.push(lost.generationId);
  await topology.restart('relay');
  let probe = await generate({});
  for (let i = 0; i < 20 && probe.status === 503; i++) {
    await new Promise((r) => setTimeout(r, 300));
    probe = await generate({});
  }
  expect(probe.status).toBe(200);
  ids.push(probe.body.generation_id as string);

  const rowsA = await ledgerRows(ids);
  // Recorded by the gateway as uncertain; an admission instance's own pass (every 10 s) may
  // already have settled it from the engine's count during the relay's restart — then it is no
  // longer uncertain, and usage_reconciliations holds that settlement (asserted below either way).
  const lostRow = rowsA.find((r) => r.generation_id === lost.generationId);
  expect(lostRow).toMatchObject({ status: 'failed' });
  if (!lostRow?.uncertain) {
    const early = await sql<{ source: string }>`SELECT source FROM usage_reconciliations WHERE generation_id = ${lost.generationId}`.execute(ledger.db);
    expect(early.rows.map((r) => r.source)).toEqual([expect.stringMatching(/^engine:/)]);
  }
  for (const r of retried) {
    // With idempotency a repeat returns the first generation: one row, one charge.
    const rows = await ledger.db.selectFrom('usage_ledger').select(['generation_id']).where('request_id', '=', r.requestId).execute();
    if (r.first === r.second) expect(rows.map((x) => x.generation_id)).toEqual([r.first]);
    else expect(rows.map((x) => x.generation_id).sort()).toEqual([r.first, r.second].sort());
  }
  await enginesIdle();
  // The relay's usage records are published asynchronously; let the last ones land before comparing.
  await new Promise((r) => setTimeout(r, 1_000));
  const phaseAEnd = new Date();

  // Reconcile phase A with the library: every engine started fresh, so the counters are asserted.
  const nc = await connectNats({ servers: nats.url, name: 'weir-reconcile-test' });
  const engineAgent = createServiceTlsAgent(topology.tls?.material('reconcile') as ServiceTls, { expectedServer: 'engine' });
  const engineFetch = ((url: string, init?: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: engineAgent })) as unknown as typeof fetch;
  let reportA: ReconciliationReport;
  try {
    const options = await reconcileOptions();
    reportA = await runReconciliation(
      { ...options, since: phaseAStart, until: phaseAEnd, engineCounters: 'assert', fix: true, usageStream: natsNames(namespace).usageStream },
      {
        queries: createReconcileQueries(ledger.db),
        nats: nc,
        reconcileReservations: () => createAdmission({ tenants: options.tenants, uncertainHoldMs: 0 }, { store: createPgAdmissionStore(ledger.db) }).reconcileReservations(),
        leaseStore: createPgLeaseStore(ledger.db),
        // The engines serve mutual TLS: read them as the reconcile command does, with its certificate.
        fetchCounters: (url: string) => fetchEngineCounters(url, { fetch: engineFetch }),
        lookup: (url: string, id: string) => lookupGenerationUsage(url, id, { fetch: engineFetch }),
      },
    );
  } finally {
    await nc.close();
    await engineAgent.close();
  }
  expect(reportA.differences).toEqual([]);
  expect(reportA.ok).toBe(true);
  // The lost relay's row was settled from the engine's own count exactly once: by this run, or
  // already by an admission instance's periodic pass (it settles uncertain rows every 10 s).
  expect(reportA.uncertain.settled.map((s) => s.generationId).filter((id) => id !== lost.generationId)).toEqual([]);
  const settledLost = await sql<{ source: string; recorded_output_tokens: number; output_tokens: number; uncertain: boolean }>`
    SELECT r.source, r.recorded_output_tokens, u.output_tokens, u.uncertain
    FROM usage_reconciliations r JOIN usage_ledger u USING (generation_id) WHERE r.generation_id = ${lost.generationId}`.execute(ledger.db);
  expect(settledLost.rows).toHaveLength(1);
  expect(settledLost.rows[0]).toMatchObject({ source: expect.stringMatching(/^engine:/), uncertain: false });
  expect(settledLost.rows[0].output_tokens).toBeGreaterThanOrEqual(settledLost.rows[0].recorded_output_tokens);
  expect(reportA.usage.ledgerTotals.records).toBe(new Set(ids).size);
  // Ledger tokens == the engines' own counters, per revision; == the usage stream; cost == tokens × prices.
  expect(reportA.engineCounters.comparisons.map((c) => [c.revisionId, c.replicas.length, c.ok])).toEqual([
    ['stories260k-slow@1', 2, true],
    ['stories260k@1', 2, true],
  ]);
  const engineTotal = reportA.engineCounters.comparisons.reduce((n, c) => n + c.engine.inputTokens + c.engine.outputTokens, 0);
  expect(engineTotal).toBe(reportA.usage.ledgerTotals.inputTokens + reportA.usage.ledgerTotals.outputTokens);
  expect(reportA.usage.stream?.ok).toBe(true);
  expect(reportA.usage.cost).toMatchObject({ ok: true, expectedNanoUsd: reportA.usage.ledgerTotals.costNanoUsd });
  expect(reportA.usage.uncertain.count).toBe(0);
  expect(reportA.reservations).toMatchObject({ ran: true, expiredHeld: 0 });
  expect(reportA.leases).toMatchObject({ lapsed: 0, stuck: [], mismatches: [] });

  // Phase B: an engine replica killed (SIGKILL) while it streams; its counters die with it.
  await waitForReplicasUp();
  const slow = topology.engines.filter((e) => e.revisionId === 'stories260k-slow@1');
  let victim: string | undefined;
  const failed = await stream({}, (d) => {
    if (d !== 3 || victim) return;
    void (async () => {
      for (const e of slow) {
        const s = (await (await topology.serviceFetch(`${e.url}/stats`)).json()) as { inUse: number };
        if (s.inUse > 0 && !victim) {
          victim = e.name;
          e.process.signal('SIGKILL');
        }
      }
    })();
  });
  expect(victim).toBeDefined();
  expect(failed.end?.finish_reason).toBe('error');
  const after = await generate({});
  expect(after.status).toBe(200);
  await ledgerRows([failed.generationId, after.body.generation_id as string]);
  await new Promise((r) => setTimeout(r, 1_000));

  // The operator command over both phases: stream and prices (no engine counters: one replica died).
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [path.join(REPO_ROOT, 'tools/scripts/run-app.mjs'), 'reconcile', '--since', phaseAStart.toISOString(), '--fix', '--json', '--no-engine-counters'],
    {
      cwd: REPO_ROOT,
      // A WEIR_CONFIG that does not exist: the command must take everything from the store.
      env: { ...process.env, ...topology.tls?.env('reconcile'), NODE_OPTIONS: '', DATABASE_URL: pg.url, NATS_URL: nats.url, WEIR_NATS_NAMESPACE: namespace, WEIR_CONFIG: path.join(workDir, 'no-such-config.yaml') },
      maxBuffer: 16 * 1024 * 1024,
    },
  ); // exit status 1 (differences) would reject
  const report = JSON.parse(stdout) as ReconciliationReport;
  expect(report.differences).toEqual([]);
  expect(report.ok).toBe(true);
  expect(report.usage.ledgerTotals.records).toBe(new Set(ids).size + 2);
  expect(report.usage.stream?.ok).toBe(true);
  // The stream carries the uncertain record as first made; the ledger holds it settled: they differ by exactly the settlement.
  // Every settlement, whoever made it (this test's runs or an admission instance's pass), is in usage_reconciliations.
  const settlements = await sql<{ input: string; output: string; nano: string }>`
    SELECT coalesce(sum(u.input_tokens - r.recorded_input_tokens), 0)::text AS input,
           coalesce(sum(u.output_tokens - r.recorded_output_tokens), 0)::text AS output,
           coalesce(sum(((u.cost_usd - r.recorded_cost_usd) * 1000000000)::bigint), 0)::text AS nano
    FROM usage_reconciliations r JOIN usage_ledger u USING (generation_id)`.execute(ledger.db);
  const settled = { inputTokens: Number(settlements.rows[0].input), outputTokens: Number(settlements.rows[0].output), costNanoUsd: Number(settlements.rows[0].nano) };
  const adjust = (k: 'inputTokens' | 'outputTokens' | 'costNanoUsd') => settled[k];
  const streamTotals = report.usage.stream?.totals;
  expect([streamTotals?.records, (streamTotals?.inputTokens ?? 0) + adjust('inputTokens'), (streamTotals?.outputTokens ?? 0) + adjust('outputTokens'), (streamTotals?.costNanoUsd ?? 0) + adjust('costNanoUsd')]).toEqual([
    report.usage.ledgerTotals.records,
    report.usage.ledgerTotals.inputTokens,
    report.usage.ledgerTotals.outputTokens,
    report.usage.ledgerTotals.costNanoUsd,
  ]);
  expect(report.usage.cost.expectedNanoUsd).toBe(report.usage.ledgerTotals.costNanoUsd);
  expect(report.uncertain.found).toBe(0);
  expect(report.config).toMatch(/^the control plane's store/);
  // Nothing held past its expiry: no reservation, no lease past hold_until + grace.
  expect(report.reservations).toMatchObject({ ran: true, expiredHeld: 0 });
  expect(report.leases).toMatchObject({ lapsed: 0, stuck: [], mismatches: [] });
  const held = await ledger.db.selectFrom('reservations').select((eb) => eb.fn.countAll<string>().as('n')).where('state', '=', 'held').where('expires_at', '<', new Date()).executeTakeFirstOrThrow();
  expect(Number(held.n)).toBe(0);
  const lapsed = await ledger.db.selectFrom('admission_leases').select((eb) => eb.fn.countAll<string>().as('n')).where('hold_until_ms', '<', String(Date.now() - 5_000)).executeTakeFirstOrThrow();
  expect(Number(lapsed.n)).toBe(0);
  // The tenant is served after the fix.
  expect((await generate({})).status).toBe(200);
});
