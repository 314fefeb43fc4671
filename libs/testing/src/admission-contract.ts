import {
  type Admission,
  type AdmissionStore,
  type BudgetState,
  type LedgerFacts,
  NANO_PER_USD,
  appScope,
  createAdmission,
  tenantScope,
} from '@weir/admission';
import type { AdmissionService, Caller, ReservationRequest, ReserveResult, TenantSpec } from '@weir/core';
import { type ContractSubject, contractCallers, contractPlatformConfig } from './port-contract-fixtures';

/** A settable wall clock (epoch ms) shared by a test and the admission under test. */
export interface ManualClock {
  now(): number;
  set(epochMs: number): void;
  advance(ms: number): void;
}

/** A {@link ManualClock} starting at `startMs` (default 2026-11-30T12:00:00Z). */
export function manualClock(startMs = Date.UTC(2026, 10, 30, 12, 0, 0)): ManualClock {
  let t = startMs;
  return { now: () => t, set: (ms) => (t = ms), advance: (ms) => (t += ms) };
}

/** A reservation request for the contract suites (acme, 10 input + 20 output tokens). */
export function reservationRequest(overrides: Partial<ReservationRequest> = {}): ReservationRequest {
  return {
    caller: contractCallers.acme,
    requestId: `req_${Math.random().toString(36).slice(2, 10)}`,
    generationId: `gen_${Math.random().toString(36).slice(2, 12)}`,
    expiresAtMs: Date.now() + 60_000,
    inputTokens: 10,
    maxOutputTokens: 20,
    worstCaseCostNanoUsd: 9_000_000_000,
    ...overrides,
  };
}

/** Callers of the admission-only fixture tenants (see {@link admissionContractTenants}). */
export const admissionCallers = {
  /** Tenant `budgetco` ($1 a month), app `web` ($0.50 a day). */
  budget: { tenantId: 'budgetco', appId: 'web', apiKeyId: 'key_budget' } satisfies Caller,
  /** Tenant `budgetco`, app `batch` (no limits of its own). */
  budgetBatch: { tenantId: 'budgetco', appId: 'batch', apiKeyId: 'key_budget_batch' } satisfies Caller,
  /** Tenant `ratey`: 3 requests and 100 tokens a minute; app `narrow`: 40 input and 60 output tokens a minute, 2 in flight. */
  rate: { tenantId: 'ratey', appId: 'narrow', apiKeyId: 'key_rate' } satisfies Caller,
  /** Tenant `ratey`, an app the configuration does not list (the tenant's limits only). */
  rateOtherApp: { tenantId: 'ratey', appId: 'other', apiKeyId: 'key_rate_other' } satisfies Caller,
  /** Tenant `bursty`: 1,000 tokens a minute, $1 a month, 1,000 in flight (the burst tests). */
  burst: { tenantId: 'bursty', appId: 'api', apiKeyId: 'key_burst' } satisfies Caller,
};

/** Limits of the admission-only fixture tenants. */
export const ADMISSION_FIXTURE = {
  budgetMonthlyNano: 1 * NANO_PER_USD,
  budgetAppDailyNano: 0.5 * NANO_PER_USD,
  burstMonthlyNano: 1 * NANO_PER_USD,
  burstTokensPerMinute: 1_000,
};

/** Tenants whose limits the admission contract exercises, in addition to the port fixtures' `acme` and `globex`. */
export function admissionContractTenants(): TenantSpec[] {
  return [
    {
      id: 'budgetco',
      name: 'Budget Co',
      apps: [
        { id: 'web', name: 'web', limits: { dailyBudgetUsd: 0.5 } },
        { id: 'batch', name: 'batch', limits: {} },
      ],
      allowedAliases: ['*'],
      defaultDeadlineMs: 120_000,
      limits: { maxConcurrent: 1_000, monthlyBudgetUsd: 1 },
    },
    {
      id: 'ratey',
      name: 'Ratey',
      apps: [{ id: 'narrow', name: 'narrow', limits: { inputTokensPerMinute: 40, outputTokensPerMinute: 60, maxConcurrent: 2 } }],
      allowedAliases: ['*'],
      defaultDeadlineMs: 120_000,
      limits: { maxConcurrent: 1_000, requestsPerMinute: 3, tokensPerMinute: 100 },
    },
    {
      id: 'bursty',
      name: 'Bursty',
      apps: [{ id: 'api', name: 'api', limits: {} }],
      allowedAliases: ['*'],
      defaultDeadlineMs: 120_000,
      limits: { maxConcurrent: 1_000, tokensPerMinute: 1_000, monthlyBudgetUsd: 1 },
    },
  ];
}

/** Every tenant the admission contracts use: the port fixtures' plus {@link admissionContractTenants}. */
export function allAdmissionTenants(): TenantSpec[] {
  return [...contractPlatformConfig().tenants, ...admissionContractTenants()];
}

/**
 * The contract every `AdmissionService` binding passes (a jest `describe` block), through the
 * port alone (so it runs over gRPC too), over {@link allAdmissionTenants}:
 * - concurrency: `acme` holds at most 2, `globex` 1 (`concurrency_limited` with a positive
 *   retry hint); an unknown tenant is rejected; tenants are independent;
 * - `settle` and `release` each end one reservation, are idempotent and accept unknown ids;
 * - budgets: exactly floor(budget ÷ worst case) equal reservations fit; the rejection is
 *   `budget_exhausted` without a retry hint and names the budget; settle refunds the unused
 *   worst case, release all of it; a settled charge is kept once; app and tenant budgets both
 *   apply; a reservation made in one month settles in that month;
 * - rate limits: requests and tokens per minute (tenant) and input/output tokens per minute
 *   (app) as token buckets with exact retry hints, refunds at settlement, a request larger
 *   than a bucket rejected without a retry hint, and the tightest windows reported;
 * - rejections hold nothing; 100 parallel reserves at a budget edge admit exactly
 *   floor(budget ÷ worst case) (equal sizes) and never more than the budget (mixed sizes).
 *
 * `setup` receives the tenants and a manual clock (epoch ms; admission must read time only from
 * it) and runs before each test (fresh state).
 */
export function describeAdmissionContract(name: string, setup: (tenants: TenantSpec[], deps: { clock: ManualClock }) => Promise<ContractSubject<AdmissionService>>): void {
  describe(`admission contract: ${name}`, () => {
    let subject: ContractSubject<AdmissionService>;
    let clock: ManualClock;
    const admission = () => subject.service;

    beforeEach(async () => {
      clock = manualClock();
      subject = await setup(allAdmissionTenants(), { clock });
    });
    afterEach(async () => {
      await subject?.close?.();
    });

    const request = (overrides: Partial<ReservationRequest> = {}) => reservationRequest({ expiresAtMs: clock.now() + 60_000, ...overrides });
    const reserveOk = async (overrides: Partial<ReservationRequest> = {}) => {
      const result = await admission().reserve(request(overrides));
      if (!result.ok) throw new Error(`expected a reservation, got ${result.reason}: ${result.message}`);
      return result.reservationId;
    };
    const rejection = async (overrides: Partial<ReservationRequest> = {}) => {
      const result = await admission().reserve(request(overrides));
      if (result.ok) throw new Error('expected a rejection, got a reservation');
      return result;
    };
    const settle = (id: string, costNanoUsd: number, inputTokens = 0, outputTokens = 0) =>
      admission().settle(id, { usage: { inputTokens, outputTokens, cachedInputTokens: 0 }, costNanoUsd });
    const budget = (worstCaseCostNanoUsd: number, caller: Caller = admissionCallers.budget) => ({ caller, worstCaseCostNanoUsd });

    describe('concurrency', () => {
      it('reserves within the limit with distinct ids', async () => {
        const a = await reserveOk();
        const b = await reserveOk();
        expect(a).not.toBe(b);
        expect(a.length).toBeGreaterThan(0);
      });

      it('rejects over the limit with concurrency_limited and a retry hint', async () => {
        await reserveOk();
        await reserveOk();
        const third = await rejection();
        expect(third.reason).toBe('concurrency_limited');
        expect(third.message.length).toBeGreaterThan(0);
        expect(third.retryAfterMs).toBeGreaterThan(0);
      });

      it('applies an app limit too', async () => {
        const small = { caller: admissionCallers.rate, inputTokens: 1, maxOutputTokens: 1 };
        await reserveOk(small);
        await reserveOk(small);
        expect(await rejection(small)).toMatchObject({ reason: 'concurrency_limited', message: expect.stringContaining('app') });
      });

      it('rejects an unknown tenant', async () => {
        const result = await admission().reserve(request({ caller: contractCallers.stranger }));
        expect(result.ok).toBe(false);
      });

      it('frees one reservation per release, idempotently', async () => {
        const a = await reserveOk();
        await reserveOk();
        await admission().release(a);
        await admission().release(a);
        await reserveOk();
        expect((await admission().reserve(request())).ok).toBe(false);
      });

      it('frees one reservation per settle, idempotently', async () => {
        const a = await reserveOk();
        await reserveOk();
        await settle(a, 123_456, 10, 7);
        await settle(a, 123_456, 10, 7);
        await admission().release(a);
        await reserveOk();
        expect((await admission().reserve(request())).ok).toBe(false);
      });

      it('accepts settle and release of unknown ids', async () => {
        await expect(admission().release('rsv_unknown')).resolves.toBeUndefined();
        await expect(settle('rsv_unknown', 0)).resolves.toBeUndefined();
      });

      it('keeps tenants independent', async () => {
        await reserveOk({ caller: contractCallers.globex });
        expect((await admission().reserve(request({ caller: contractCallers.globex }))).ok).toBe(false);
        await reserveOk();
        await reserveOk();
      });
    });

    describe('budgets', () => {
      const worst = 300_000_000; // $0.30 against the tenant's $1/month: 3 fit

      it('admits exactly floor(budget ÷ worst case), then rejects budget_exhausted without a retry hint, naming the budget', async () => {
        for (let i = 0; i < 3; i++) await reserveOk(budget(worst, admissionCallers.budgetBatch));
        const r = await rejection(budget(worst, admissionCallers.budgetBatch));
        expect(r.reason).toBe('budget_exhausted');
        expect(r.retryAfterMs).toBeUndefined();
        expect(r.message).toContain("tenant's monthly budget of $1.00");
        expect(r.message).toContain('$0.10 remains');
        // What is left still fits exactly.
        await reserveOk(budget(100_000_000, admissionCallers.budgetBatch));
        expect((await rejection(budget(1, admissionCallers.budgetBatch))).reason).toBe('budget_exhausted');
      });

      it("applies the app's daily budget as well as the tenant's monthly one", async () => {
        await reserveOk(budget(500_000_000));
        const r = await rejection(budget(1));
        expect(r.message).toContain("app's daily budget of $0.50");
        // The tenant's other app still has the rest of the month.
        await reserveOk(budget(500_000_000, admissionCallers.budgetBatch));
        expect(await rejection(budget(1, admissionCallers.budgetBatch))).toMatchObject({ reason: 'budget_exhausted', message: expect.stringContaining("tenant's monthly") });
      });

      it('settles to the actual cost and refunds the rest; a release refunds everything; a second settle charges nothing', async () => {
        const caller = admissionCallers.budgetBatch;
        const a = await reserveOk(budget(600_000_000, caller));
        await settle(a, 100_000_000);
        await settle(a, 100_000_000);
        await settle(a, 900_000_000); // ignored: already settled
        const b = await reserveOk(budget(800_000_000, caller)); // 100 settled + 800 held ≤ 1,000
        expect((await rejection(budget(100_000_001, caller))).reason).toBe('budget_exhausted');
        await admission().release(b);
        await reserveOk(budget(900_000_000, caller));
      });

      it('holds nothing for rejected requests', async () => {
        const caller = admissionCallers.budgetBatch;
        await reserveOk(budget(700_000_000, caller));
        for (let i = 0; i < 5; i++) expect((await rejection(budget(400_000_000, caller))).reason).toBe('budget_exhausted');
        await reserveOk(budget(300_000_000, caller));
      });

      it('uses UTC calendar months: a new month has the whole budget, and a reservation settles in the month it was made', async () => {
        const caller = admissionCallers.budgetBatch;
        clock.set(Date.UTC(2026, 10, 30, 23, 59, 59));
        const november = await reserveOk(budget(1 * 1_000_000_000, caller));
        expect((await rejection(budget(1, caller))).reason).toBe('budget_exhausted');
        clock.set(Date.UTC(2026, 11, 1, 0, 0, 1));
        const december = await reserveOk(budget(400_000_000, caller));
        await settle(november, 1_000_000_000); // charged to November
        await reserveOk(budget(600_000_000, caller)); // December: 400 + 600 = 1,000
        expect((await rejection(budget(1, caller))).reason).toBe('budget_exhausted');
        await admission().release(december);
      });

      it('takes a burst of 100 parallel equal reservations at the edge: exactly floor(budget ÷ worst case) pass', async () => {
        const size = 70_000_000; // floor(1e9 / 7e7) = 14
        const results = await Promise.all(
          Array.from({ length: 100 }, () => admission().reserve(request({ ...budget(size, admissionCallers.burst), inputTokens: 1, maxOutputTokens: 1 }))),
        );
        expect(results.filter((r) => r.ok)).toHaveLength(Math.floor(ADMISSION_FIXTURE.burstMonthlyNano / size));
        for (const r of results) if (!r.ok) expect(r.reason).toBe('budget_exhausted');
      });

      it('takes a burst of 100 parallel mixed reservations: what passes never exceeds the budget', async () => {
        const sizes = Array.from({ length: 100 }, (_, i) => 10_000_000 + ((i * 7_919_993) % 50_000_000));
        const results = await Promise.all(sizes.map((s) => admission().reserve(request({ ...budget(s, admissionCallers.burst), inputTokens: 1, maxOutputTokens: 1 }))));
        const admitted = sizes.filter((_, i) => results[i].ok);
        expect(admitted.length).toBeGreaterThan(0);
        expect(admitted.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstMonthlyNano);
      });
    });

    describe('rate limits', () => {
      const rate = (inputTokens: number, maxOutputTokens: number) => ({ caller: admissionCallers.rate, inputTokens, maxOutputTokens, worstCaseCostNanoUsd: 0 });

      it('limits requests per minute with a token bucket and an exact retry hint', async () => {
        for (let i = 0; i < 3; i++) {
          const id = await reserveOk(rate(1, 1));
          await admission().release(id);
        }
        const r = await rejection(rate(1, 1));
        expect(r).toMatchObject({ reason: 'rate_limited', retryAfterMs: 20_000 });
        clock.advance(10_000); // half drained: one request in another 10 s
        expect((await rejection(rate(1, 1))).retryAfterMs).toBe(10_000);
        clock.advance(10_000);
        await reserveOk(rate(1, 1));
      });

      it('charges the worst-case tokens, refunds to the measured ones at settlement, and reports the tightest windows', async () => {
        const wide = (inputTokens: number, maxOutputTokens: number) => ({ caller: admissionCallers.rateOtherApp, inputTokens, maxOutputTokens, worstCaseCostNanoUsd: 0 });
        const first = await admission().reserve(request(wide(10, 50)));
        expect(first).toMatchObject({
          ok: true,
          rateLimits: { requests: { limit: 3, remaining: 2, resetMs: 20_000 }, tokens: { limit: 100, remaining: 40, resetMs: 36_000 } },
        });
        // 60 of 100 tokens used; another 60 needs 20 more to drain: 20 × 60,000 / 100 = 12,000 ms.
        const r = await rejection(wide(10, 50));
        expect(r).toMatchObject({ reason: 'rate_limited', retryAfterMs: 12_000 });
        expect(r.rateLimits?.tokens).toEqual({ limit: 100, remaining: 40, resetMs: 36_000 });
        if (!first.ok) return;
        await settle(first.reservationId, 0, 10, 5); // refunds 45: level 15
        await reserveOk(wide(10, 50));
      });

      it('limits input and output tokens per minute at the app', async () => {
        await reserveOk(rate(30, 1));
        expect(await rejection(rate(11, 1))).toMatchObject({ reason: 'rate_limited', message: expect.stringContaining('input tokens per minute') });
        clock.advance(60_000);
        await reserveOk(rate(1, 60));
        expect(await rejection(rate(1, 1))).toMatchObject({ reason: 'rate_limited', retryAfterMs: 1_000, message: expect.stringContaining('output tokens per minute') });
      });

      it('rejects a request larger than a bucket without a retry hint, telling the client to lower max_tokens', async () => {
        const r = await rejection(rate(1, 99)); // 100 tokens fit the tenant, but 99 output > the app's 60
        expect(r.reason).toBe('rate_limited');
        expect(r.retryAfterMs).toBeUndefined();
        expect(r.message).toContain('max_tokens');
        await reserveOk(rate(1, 1));
      });

      it('takes a burst of 100 parallel reservations: the admitted tokens never exceed the bucket', async () => {
        const results = await Promise.all(
          Array.from({ length: 100 }, (_, i) => admission().reserve(request({ caller: admissionCallers.burst, inputTokens: 10, maxOutputTokens: 5 + ((i * 37) % 60), worstCaseCostNanoUsd: 0 }))),
        );
        let tokens = 0;
        results.forEach((r, i) => {
          if (r.ok) tokens += 10 + 5 + ((i * 37) % 60);
          else expect(r.reason).toBe('rate_limited');
        });
        expect(tokens).toBeGreaterThan(0);
        expect(tokens).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstTokensPerMinute);
      });
    });
  });
}

/** What {@link describeAdmissionStoreContract} runs on: two admission instances' stores over one shared state. */
export interface AdmissionStoreSubject {
  /** Two stores over the same state (for Postgres: two connection pools = two admission instances). */
  stores: [AdmissionStore, AdmissionStore];
  /** Every budget row, read independently of the stores' transactions (the sampler). */
  readBudgets(): Promise<BudgetState[]>;
  /** Writes a usage-ledger row for a generation (tenant and app as given). */
  recordLedger(row: { generationId: string; tenantId: string; appId: string } & LedgerFacts): Promise<void>;
  close(): Promise<void>;
}

/**
 * The contract of `AdmissionStore` implementations, driven through {@link createAdmission}:
 * two instances over one state (durability across a restart; bursts of ≥ 100 parallel reserves
 * split over both instances, sampled while they run, keep settled + reserved ≤ budget and the
 * admitted tokens ≤ the bucket; settles to random actuals end with settled = Σ actuals
 * exactly), and reconciliation (expired reservations settled from the ledger or released;
 * charges corrected to the ledger; idempotent and safe on two instances at once).
 *
 * Options: `burst` (parallel reserves per burst, default 120); `minSamples` (budget samples the
 * sampler must take during the equal-size burst, default 2; a single-connection database
 * such as PGlite can only sample between transactions and may take 1).
 */
export function describeAdmissionStoreContract(name: string, setup: () => Promise<AdmissionStoreSubject>, options: { burst?: number; minSamples?: number } = {}): void {
  const burst = options.burst ?? 120;
  const minSamples = options.minSamples ?? 2;
  describe(`admission store contract: ${name}`, () => {
    let subject: AdmissionStoreSubject;
    let clock: ManualClock;
    let a: Admission;
    let b: Admission;
    const tenants = allAdmissionTenants();
    const instance = (store: AdmissionStore) => createAdmission({ tenants }, { store, clock });

    beforeEach(async () => {
      clock = manualClock();
      subject = await setup();
      a = instance(subject.stores[0]);
      b = instance(subject.stores[1]);
    });
    afterEach(async () => {
      await subject?.close();
    });

    const burstScope = tenantScope(admissionCallers.burst.tenantId);
    const committed = (rows: BudgetState[], scope: string, period: 'month' | 'day') =>
      rows.filter((r) => r.scope === scope && r.period === period).reduce((s, r) => s + r.settledNano + r.reservedNano, 0);
    const row = async (scope: string, period: 'month' | 'day') => {
      const rows = (await subject.readBudgets()).filter((r) => r.scope === scope && r.period === period);
      expect(rows).toHaveLength(1);
      return rows[0];
    };
    const req = (caller: Caller, worst: number, extra: Partial<ReservationRequest> = {}) =>
      reservationRequest({ caller, worstCaseCostNanoUsd: worst, expiresAtMs: clock.now() + 60_000, ...extra });
    const okId = (r: ReserveResult) => {
      if (!r.ok) throw new Error(`expected a reservation, got ${r.reason}: ${r.message}`);
      return r.reservationId;
    };

    /** Runs `work` while sampling the budget rows; resolves with its result and the highest committed total seen per period. */
    async function sampled<T>(work: Promise<T>): Promise<{ result: T; samples: number; maxMonth: number }> {
      let done = false;
      let samples = 0;
      let maxMonth = 0;
      const sampler = (async () => {
        while (!done) {
          const rows = await subject.readBudgets();
          maxMonth = Math.max(maxMonth, committed(rows, burstScope, 'month'));
          samples++;
        }
      })();
      let result: T;
      try {
        result = await work;
      } finally {
        done = true;
        await sampler;
      }
      return { result, samples, maxMonth };
    }

    it('keeps its state across a restart: a new instance settles what the old one reserved', async () => {
      const id = okId(await a.reserve(req(admissionCallers.budgetBatch, 600_000_000)));
      const restarted = instance(subject.stores[1]);
      await restarted.settle(id, { usage: { inputTokens: 10, outputTokens: 3, cachedInputTokens: 0 }, costNanoUsd: 250_000_000 });
      expect(await row(tenantScope('budgetco'), 'month')).toMatchObject({ settledNano: 250_000_000, reservedNano: 0 });
      expect(await restarted.countHeld()).toBe(0);
      okId(await restarted.reserve(req(admissionCallers.budgetBatch, 750_000_000)));
      expect((await a.reserve(req(admissionCallers.budgetBatch, 1))).ok).toBe(false);
    });

    it(`holds settled + reserved ≤ budget while two instances take ${burst} parallel reserves of equal size, admitting exactly floor(budget ÷ worst case)`, async () => {
      const size = 45_000_000; // floor(1e9 / 4.5e7) = 22
      const { result, samples, maxMonth } = await sampled(
        Promise.all(Array.from({ length: burst }, (_, i) => (i % 2 ? a : b).reserve(req(admissionCallers.burst, size, { inputTokens: 1, maxOutputTokens: 1 })))),
      );
      expect(samples).toBeGreaterThanOrEqual(minSamples);
      expect(maxMonth).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstMonthlyNano);
      expect(result.filter((r) => r.ok)).toHaveLength(Math.floor(ADMISSION_FIXTURE.burstMonthlyNano / size));
      for (const r of result) if (!r.ok) expect(r.reason).toBe('budget_exhausted');
      expect(await row(burstScope, 'month')).toMatchObject({ settledNano: 0, reservedNano: 22 * size });
    });

    it(`holds the invariant for ${burst} parallel mixed reserves on two instances and settles to the exact sum of actuals`, async () => {
      let seed = 42;
      const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
      const sizes = Array.from({ length: burst }, () => 5_000_000 + Math.floor(random() * 60_000_000));
      const { result, maxMonth } = await sampled(
        Promise.all(sizes.map((s, i) => (i % 2 ? a : b).reserve(req(admissionCallers.burst, s, { inputTokens: 1, maxOutputTokens: 1 })))),
      );
      expect(maxMonth).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstMonthlyNano);
      const admitted = result.flatMap((r, i) => (r.ok ? [{ id: r.reservationId, worst: sizes[i] }] : []));
      expect(admitted.reduce((s, x) => s + x.worst, 0)).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstMonthlyNano);
      // Settle everything (half on each instance) to random actuals ≤ the worst case, sampling meanwhile.
      const actuals = admitted.map((x) => Math.floor(random() * (x.worst + 1)));
      const settled = await sampled(
        Promise.all(admitted.map((x, i) => (i % 2 ? b : a).settle(x.id, { usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0 }, costNanoUsd: actuals[i] }))),
      );
      expect(settled.maxMonth).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstMonthlyNano);
      expect(await row(burstScope, 'month')).toEqual(expect.objectContaining({ settledNano: actuals.reduce((s, x) => s + x, 0), reservedNano: 0 }));
      expect(await a.countHeld()).toBe(0);
    });

    it(`does not multiply tokens per minute across two instances (${burst} parallel reserves)`, async () => {
      const equal = await Promise.all(
        Array.from({ length: burst }, (_, i) => (i % 2 ? a : b).reserve(req(admissionCallers.burst, 0, { inputTokens: 10, maxOutputTokens: 30 }))),
      );
      expect(equal.filter((r) => r.ok)).toHaveLength(ADMISSION_FIXTURE.burstTokensPerMinute / 40);
      clock.advance(60_000); // the bucket is full again
      const sizes = Array.from({ length: burst }, (_, i) => 10 + ((i * 53) % 70));
      const mixed = await Promise.all(sizes.map((s, i) => (i % 2 ? a : b).reserve(req(admissionCallers.burst, 0, { inputTokens: 5, maxOutputTokens: s - 5 }))));
      const tokens = sizes.filter((_, i) => mixed[i].ok).reduce((s, x) => s + x, 0);
      expect(tokens).toBeGreaterThan(0);
      expect(tokens).toBeLessThanOrEqual(ADMISSION_FIXTURE.burstTokensPerMinute);
      for (const r of mixed) if (!r.ok) expect(r.reason).toBe('rate_limited');
    });

    it('reconciles expired reservations: settled from the ledger when it has a row, else released; live ones are left alone', async () => {
      const caller = admissionCallers.budgetBatch;
      const withRow = req(caller, 300_000_000, { expiresAtMs: clock.now() + 1_000 });
      const vanished = req(caller, 200_000_000, { expiresAtMs: clock.now() + 1_000 });
      const live = req(caller, 100_000_000, { expiresAtMs: clock.now() + 600_000 });
      for (const r of [withRow, vanished, live]) okId(await a.reserve(r));
      await subject.recordLedger({ generationId: withRow.generationId, tenantId: caller.tenantId, appId: caller.appId, costNano: 123_456_789, inputTokens: 10, outputTokens: 4 });
      expect(await b.reconcileReservations()).toMatchObject({ expiredSettled: 0, expiredReleased: 0, corrected: 0 });
      clock.advance(1_000);
      const [first, second] = await Promise.all([a.reconcileReservations(), b.reconcileReservations()]);
      expect(first.expiredSettled + second.expiredSettled).toBe(1);
      expect(first.expiredReleased + second.expiredReleased).toBe(1);
      expect(await row(tenantScope('budgetco'), 'month')).toMatchObject({ settledNano: 123_456_789, reservedNano: 100_000_000 });
      expect(await a.countHeld()).toBe(1);
      expect(await a.reconcileReservations()).toMatchObject({ expiredSettled: 0, expiredReleased: 0, corrected: 0 });
    });

    it('corrects a charge to the ledger, including a late settle after expiry, once', async () => {
      const caller = admissionCallers.budgetBatch;
      const differs = req(caller, 300_000_000);
      const late = req(caller, 200_000_000, { expiresAtMs: clock.now() + 1_000 });
      const differsId = okId(await a.reserve(differs));
      const lateId = okId(await a.reserve(late));
      await a.settle(differsId, { usage: { inputTokens: 10, outputTokens: 20, cachedInputTokens: 0 }, costNanoUsd: 100_000_000 });
      clock.advance(1_000);
      expect(await a.reconcileReservations()).toMatchObject({ expiredReleased: 1 });
      // The request finishes after its reservation expired: the settle is a no-op…
      await b.settle(lateId, { usage: { inputTokens: 10, outputTokens: 20, cachedInputTokens: 0 }, costNanoUsd: 150_000_000 });
      expect(await row(appScope('budgetco', 'batch'), 'month')).toMatchObject({ settledNano: 100_000_000, reservedNano: 0 });
      // …and the ledger (the truth) brings the charge back, as it corrects the other one.
      await subject.recordLedger({ generationId: late.generationId, tenantId: caller.tenantId, appId: caller.appId, costNano: 150_000_000, inputTokens: 10, outputTokens: 20 });
      await subject.recordLedger({ generationId: differs.generationId, tenantId: caller.tenantId, appId: caller.appId, costNano: 110_000_001, inputTokens: 10, outputTokens: 22 });
      const [x, y] = await Promise.all([a.reconcileReservations(), b.reconcileReservations()]);
      expect(x.corrected + y.corrected).toBe(2);
      expect(x.correctedNano + y.correctedNano).toBe(160_000_001);
      for (const scope of [tenantScope('budgetco'), appScope('budgetco', 'batch')]) {
        expect(await row(scope, 'month')).toMatchObject({ settledNano: 260_000_001, reservedNano: 0 });
        expect(await row(scope, 'day')).toMatchObject({ settledNano: 260_000_001, reservedNano: 0 });
      }
      expect(await a.reconcileReservations()).toMatchObject({ corrected: 0 });
    });
  });
}
