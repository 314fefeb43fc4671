/**
 * The budget invariant over HTTP (issue 4 §3, issue 13 item 1), one body for the all-in-one and
 * the split topology: a tenant with a tiny monthly budget takes 100 parallel generations of mixed
 * `max_output_tokens` at the edge of it, while a sampler reads `budget_periods` through the
 * same database and checks settled + reserved + leased ≤ budget at every sample (ADR 0002: what
 * every holder's budget leases hold counts as committed). Every rejection is a 429 with the
 * OpenAI error shape; at the end, settled equals the ledger's sum for the tenant exactly and
 * nothing stays reserved.
 */
import { sql } from 'kysely';
import { createTemporaryPostgresDatabase, openDatabase, type TemporaryPostgresDatabase, type WeirDatabase } from '@weir/store-pg';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';

/** The demo tenant's monthly budget in this suite: $0.0002 = 200,000 nano-USD (about 25 worst cases of these requests). */
export const BUDGET_NANO = 200_000;

/** The e2e configuration with a tiny monthly budget and room for the whole burst in flight. */
export const BUDGET_E2E_CONFIG = (() => {
  const yaml = E2E_CONFIG.replace('limits: { max_concurrent: 64 }', `limits: { max_concurrent: 256, monthly_budget_usd: ${BUDGET_NANO / 1e9} }`);
  if (yaml === E2E_CONFIG) throw new Error('the e2e fixture changed: budget-suite.ts cannot set the demo tenant limits');
  return yaml;
})();

/** A running composition, as this suite sees it. */
export interface BudgetTopology {
  /** Gateway base URLs; requests go round-robin over them. */
  urls: string[];
  output(): string;
  /** Called after the burst: assertions about the composition itself (e.g. every admission instance served). */
  afterBurst?(): Promise<void>;
  /** Graceful stop; true when every process exited 0. */
  stop(): Promise<boolean>;
}

/** Defines the suite against the composition `start` creates on the given database. */
export function describeBudgetSuite(name: string, start: (databaseUrl: string) => Promise<BudgetTopology>): void {
  describe(`budget invariant: ${name}`, () => {
    let pg: TemporaryPostgresDatabase;
    let weir: BudgetTopology;
    let sampler: WeirDatabase;

    beforeAll(async () => {
      pg = await createTemporaryPostgresDatabase();
      weir = await start(pg.url);
      sampler = await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 1 });
    });
    afterAll(async () => {
      try {
        if (weir) expect(await weir.stop()).toBe(true);
      } finally {
        await sampler?.close();
        await pg?.drop();
      }
    });

    /** settled, reserved (ADR 0001's per-request holds) and leased (ADR 0002) of the demo tenant's current month (nano-USD). */
    async function tenantMonth(): Promise<{ settled: number; reserved: number; leased: number }> {
      const { rows } = await sql<{ settled: string; reserved: string; leased: string }>`
        SELECT coalesce(sum(settled_nano), 0)::text AS settled, coalesce(sum(reserved_nano), 0)::text AS reserved, coalesce(sum(leased_nano), 0)::text AS leased
        FROM budget_periods WHERE scope = 'tenant:' || (SELECT uid FROM tenants WHERE id = 'demo') AND period = 'month'`.execute(sampler.db);
      return { settled: Number(rows[0].settled), reserved: Number(rows[0].reserved), leased: Number(rows[0].leased) };
    }

    async function ledgerNano(): Promise<{ rows: number; nano: number }> {
      const { rows } = await sql<{ n: string; nano: string }>`
        SELECT count(*)::text AS n, coalesce(sum((cost_usd * 1000000000)::bigint), 0)::text AS nano FROM usage_ledger WHERE tenant_id = 'demo'`.execute(sampler.db);
      return { rows: Number(rows[0].n), nano: Number(rows[0].nano) };
    }

    it('never lets 100 parallel requests of mixed sizes spend past the budget, and settles to the ledger exactly', async () => {
      let sampling = true;
      let samples = 0;
      let maxCommitted = 0;
      const sampling$ = (async () => {
        while (sampling) {
          const m = await tenantMonth();
          maxCommitted = Math.max(maxCommitted, m.settled + m.reserved + m.leased);
          samples++;
        }
      })();

      const responses = await Promise.all(
        Array.from({ length: 100 }, async (_, i) => {
          const res = await fetch(`${weir.urls[i % weir.urls.length]}/v1/generations`, {
            method: 'POST',
            headers: { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' },
            body: JSON.stringify({ model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 8 + ((i * 13) % 57), temperature: 0 }),
          });
          return { status: res.status, body: (await res.json()) as { error?: { type: string; code: string }; generation_id?: string } };
        }),
      );
      // Let the last settlements land while still sampling.
      const until = Date.now() + 15_000;
      while ((await tenantMonth()).reserved > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      sampling = false;
      await sampling$;

      expect(samples).toBeGreaterThan(5);
      expect(maxCommitted).toBeLessThanOrEqual(BUDGET_NANO);
      const admitted = responses.filter((r) => r.status === 200);
      const rejected = responses.filter((r) => r.status !== 200);
      expect(admitted.length).toBeGreaterThan(0);
      expect(rejected.length).toBeGreaterThan(0);
      // Every rejection is a 429; anything else is listed with its error (code and message).
      expect(rejected.filter((r) => r.status !== 429).map((r) => ({ status: r.status, error: r.body.error }))).toEqual([]);
      for (const r of rejected) {
        const { type, code } = r.body.error ?? {};
        expect([
          ['insufficient_quota', 'budget_exhausted'],
          ['rate_limit_error', 'rate_limited'],
          ['rate_limit_error', 'concurrency_limited'],
        ]).toContainEqual([type, code]);
      }
      expect(rejected.some((r) => r.body.error?.code === 'budget_exhausted')).toBe(true);

      // The ledger (batched) catches up; then settled = Σ ledger cost exactly, nothing reserved.
      const ledgerUntil = Date.now() + 10_000;
      let ledger = await ledgerNano();
      while (ledger.rows < admitted.length && Date.now() < ledgerUntil) {
        await new Promise((r) => setTimeout(r, 100));
        ledger = await ledgerNano();
      }
      expect(ledger.rows).toBe(admitted.length);
      // The applier's transaction moves each cost from a lease to settled: wait for the last one.
      let final = await tenantMonth();
      while (final.settled !== ledger.nano && Date.now() < ledgerUntil) {
        await new Promise((r) => setTimeout(r, 100));
        final = await tenantMonth();
      }
      expect({ settled: final.settled, reserved: final.reserved }).toEqual({ settled: ledger.nano, reserved: 0 });
      expect(final.settled + final.leased).toBeLessThanOrEqual(BUDGET_NANO);
      // The burst spent the budget down to less than a few requests' worst cases (about 8,000
      // nano-USD each): what leases strand at the edge is small, not a whole slice per holder.
      expect(final.settled).toBeGreaterThan(BUDGET_NANO * 0.5);
      const held = await sql<{ n: string }>`SELECT count(*)::text AS n FROM reservations WHERE state = 'held'`.execute(sampler.db);
      expect(Number(held.rows[0].n)).toBe(0);
      await weir.afterBurst?.();
    });
  });
}
