/**
 * The split topology's money path under kill -9 (issue 13, ADR 0002 §3): two gateways and two
 * admission instances on budget leases, each gateway preferring its own instance.
 *
 * - A gateway killed while a keyed request streams: its relay stops the generation and journals
 *   the settlement with the request's result; a retry of the same `request_id` on the other
 *   gateway gets that result within seconds (not after the claim's 2-minute lease), and the
 *   request has exactly one usage row.
 * - An admission instance killed: its gateway's requests move to the other instance and keep
 *   being served; the dead holder's leases are reclaimed by the survivor once their `hold_until`
 *   passed (6 s here, `ADMISSION_LEASE_HOLD_MS`), and every budget row's leased money is again
 *   exactly what its live leases hold — settled + leased ≤ budget throughout.
 *
 * A private Postgres database and the machine's NATS under a random namespace; processes are
 * stopped by pid.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { createTemporaryPostgresDatabase, openDatabase, type TemporaryPostgresDatabase, type WeirDatabase } from '@weir/store-pg';
import { tinyModelPath } from '@weir/testing';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';
import { readSse } from './support/sse';

jest.setTimeout(180_000);

/** $0.05 a month: room for every request of the suite, so every budget row is leased. */
const BUDGET_USD = 0.05;
const CONFIG = (() => {
  let yaml = E2E_CONFIG.replace('limits: { max_concurrent: 64 }', `limits: { max_concurrent: 64, monthly_budget_usd: ${BUDGET_USD} }`);
  // A reservation expires 1 s after its deadline, so 6-second leases cover the suite's short
  // deadlines without extensions, and a dead holder's leases lapse within seconds.
  yaml = yaml.replace('defaults:\n', 'defaults:\n  admission: { reservation_grace_ms: 1000 }\n');
  if (!yaml.includes('monthly_budget_usd') || !yaml.includes('reservation_grace_ms')) throw new Error('the e2e fixture changed: split-money-faults cannot set its limits');
  return yaml;
})();

let pg: TemporaryPostgresDatabase;
let db: WeirDatabase;
let topology: SplitTopology;
let workDir: string;

beforeAll(async () => {
  pg = await createTemporaryPostgresDatabase();
  workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-split-money-'));
  topology = await startSplitTopology({
    configText: CONFIG,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl: pg.url,
    gateways: 2,
    admissionInstances: 2,
    natsNamespace: `e2e-${randomBytes(4).toString('hex')}`,
    deleteNatsStreamOnStop: true,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY, ADMISSION_LEASE_HOLD_MS: '6000', ADMISSION_RECLAIM_EVERY_MS: '500', ADMISSION_RECLAIM_GRACE_MS: '1000' },
  });
  db = await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 2 });
});

afterAll(async () => {
  try {
    await topology?.stop();
  } finally {
    await db?.close();
    await pg?.drop();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }
});

const headers = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };

async function generate(url: string, body: Record<string, unknown>): Promise<{ status: number; headers: Headers; body: Record<string, unknown> }> {
  const res = await fetch(`${url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

/** Every budget row whose leased money differs from what its live leases hold (should be none). */
async function leaseAccountingErrors(): Promise<unknown[]> {
  const { rows } = await sql<{ scope: string; period: string; leased: string; held: string; settled: string }>`
    SELECT b.scope, b.period, b.leased_nano::text AS leased, b.settled_nano::text AS settled,
           coalesce((SELECT sum(l.granted_nano - l.consumed_nano) FROM admission_leases l
                     WHERE l.kind = 'budget' AND l.scope = b.scope AND l.period = b.period AND l.starts_on = b.starts_on), 0)::text AS held
    FROM budget_periods b`.execute(db.db);
  return rows.filter((r) => r.leased !== r.held);
}

async function tenantMonth(): Promise<{ settled: number; leased: number }> {
  const { rows } = await sql<{ settled: string; leased: string }>`
    SELECT coalesce(sum(settled_nano), 0)::text AS settled, coalesce(sum(leased_nano), 0)::text AS leased
    FROM budget_periods WHERE scope = 'tenant:' || (SELECT uid FROM tenants WHERE id = 'demo') AND period = 'month'`.execute(db.db);
  return { settled: Number(rows[0].settled), leased: Number(rows[0].leased) };
}

describe('a gateway killed while a keyed request streams', () => {
  it('leaves the result to its relay: a retry on the other gateway gets it within seconds, and one usage row', async () => {
    const key = `order-${randomBytes(4).toString('hex')}`;
    // A short deadline: the reservation (deadline + 1 s) fits in the 6-second leases, so the next
    // test's reclaim is not held back by it (a longer one extends its lease's hold_until).
    const body = { model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 60, deadline_ms: 4_000, request_id: key, temperature: 0 };
    const victim = topology.gateways[1];
    const res = await fetch(`${victim.url}/v1/generations`, { method: 'POST', headers, body: JSON.stringify({ ...body, stream: true }) });
    expect(res.status).toBe(200);
    let generationId = '';
    await readSse(res, {
      stopAfter: (e, all) => {
        if (e.event === 'start') generationId = (JSON.parse(e.data) as { generation_id: string }).generation_id;
        if (all.filter((x) => x.event === 'delta').length === 3) {
          victim.process.signal('SIGKILL');
          return true;
        }
        return false;
      },
    }).catch(() => undefined);
    const killedAt = performance.now();
    const retry = await generate(topology.gateways[0].url, body);
    const waitedMs = performance.now() - killedAt;
    process.stderr.write(`retry of a dead gateway's key answered in ${Math.round(waitedMs)} ms\n`);
    expect({ status: retry.status, error: retry.body.error }).toEqual({ status: 200, error: undefined });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.generation_id).toBe(generationId);
    // Not the claim's lease (deadline + grace, minutes): seconds (generous margin for a loaded CI machine).
    expect(waitedMs).toBeLessThan(15_000);

    // Exactly one row for the request, billed what the relay counted, named by the key.
    await new Promise((r) => setTimeout(r, 500));
    const rows = await db.db.selectFrom('usage_ledger').selectAll().where('tenant_id', '=', 'demo').where('request_id', '=', key).execute();
    expect(rows.map((r) => r.generation_id)).toEqual([generationId]);
    expect(rows[0].output_tokens).toBe((retry.body.usage as { output_tokens: number }).output_tokens);
    expect(rows[0].reservation_id).toEqual(expect.any(String));

    // Once more after the row: still the same answer, still one row.
    const again = await generate(topology.gateways[0].url, body);
    expect(again.body.generation_id).toBe(generationId);
    expect(await db.db.selectFrom('usage_ledger').select('generation_id').where('request_id', '=', key).execute()).toHaveLength(1);
    await topology.restart(victim.name);
  });
});

describe('an admission instance killed', () => {
  it('leaves its gateway served by the other instance, and its leases are reclaimed', async () => {
    const gateway = topology.gateways[1].url; // prefers admission-1
    const short = { model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 8, temperature: 0, deadline_ms: 3_000 };
    for (let i = 0; i < 4; i++) expect((await generate(gateway, short)).status).toBe(200);
    const holderOf = (name: string) => {
      const line = topology
        .output()
        .split('\n')
        .reverse()
        .find((l) => l.startsWith(`[${name}]`) && l.includes('admission listening'));
      return /"holder":"([^"]+)"/.exec(line ?? '')?.[1];
    };
    const dead = holderOf('admission-1');
    expect(dead).toEqual(expect.stringMatching(/^hld_/));
    const leasesOf = async (holder: string) => Number((await sql<{ n: string }>`SELECT count(*)::text AS n FROM admission_leases WHERE holder = ${holder}`.execute(db.db)).rows[0].n);
    const leaseRows = () => sql`SELECT holder, kind, scope, period, granted_nano, consumed_nano, hold_until_ms, ${Date.now()}::bigint AS now_ms FROM admission_leases`.execute(db.db).then((r) => r.rows);
    expect(await leasesOf(dead as string)).toBeGreaterThan(0);

    topology.processes.get('admission-1')?.signal('SIGKILL');
    // Its gateway keeps serving: every request moves to admission (instance 0).
    const after = [];
    for (let i = 0; i < 6; i++) after.push(await generate(gateway, short));
    expect(after.map((r) => [r.status, r.status === 200 ? '' : JSON.stringify(r.body)])).toEqual(Array(6).fill([200, '']));

    // The survivor reclaims the dead holder's leases once their hold_until (+ grace) passed.
    const until = Date.now() + 60_000;
    while ((await leasesOf(dead as string)) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 250));
    expect({ left: await leasesOf(dead as string), leases: await leaseRows() }).toMatchObject({ left: 0 });
    expect(await leaseAccountingErrors()).toEqual([]);
    const month = await tenantMonth();
    expect(month.settled + month.leased).toBeLessThanOrEqual(BUDGET_USD * 1e9);
    const ledgerNano = async () => Number((await sql<{ nano: string }>`SELECT coalesce(sum((cost_usd * 1000000000)::bigint), 0)::text AS nano FROM usage_ledger WHERE tenant_id = 'demo'`.execute(db.db)).rows[0].nano);
    // The applier catches up; then the tenant's settled spend is the ledger's, exactly.
    const settledUntil = Date.now() + 10_000;
    let [settled, billed] = [month.settled, await ledgerNano()];
    while (settled !== billed && Date.now() < settledUntil) {
      await new Promise((r) => setTimeout(r, 200));
      [settled, billed] = [(await tenantMonth()).settled, await ledgerNano()];
    }
    expect(settled).toBe(billed);
    await topology.restart('admission-1');
  });
});
