/**
 * The chaos proof's invariants on hand-made evidence: each one holds on a clean run and breaks
 * on exactly the fault it is there to catch (so a harness bug cannot make a broken Weir pass).
 */
import type { ChaosAttempt, ChaosGeneration } from '@weir/testing';
import { checkChaos, type ChaosEvidence, type InvariantName } from './checks';
import type { AttemptRecord, RequestRecord } from './client';
import { COUNTED_ALIAS, type PlannedRequest, REPORTED_ALIAS } from './plan';
import type { LedgerRow } from './state';

const T0 = 1_800_000_000_000;
const BUDGET = 1_000_000;

function plan(planId: string, over: Partial<PlannedRequest> = {}): PlannedRequest {
  return { index: Number(planId.slice(1)), planId, atMs: 0, alias: REPORTED_ALIAS, route: 'chat', stream: true, includeUsage: true, schedule: { tokens: 5 }, maxTokens: 10, prompt: `chaos-plan:${planId} a b`, maxRetries: 0, retryAfterCancel: false, repeatAfterAnswer: false, gateway: 0, ...over };
}

function upstream(generationId: string, planId: string, attempts: Array<Partial<ChaosAttempt>>): ChaosGeneration {
  return {
    generationId,
    planId,
    attempts: attempts.map((a, i) => ({ generationId, attempt: i + 1, replicaId: 'r/0', flavour: 'weir-engine', planId, startedAtMs: T0, endedAtMs: T0 + 100, ending: 'finished', promptTokens: 7, produced: 5, usageReported: 'continuous', stream: true, ...a })),
  };
}

function client(p: PlannedRequest, attempts: Array<Partial<AttemptRecord>>): RequestRecord {
  return { plan: p, attempts: attempts.map((a, i) => ({ n: i + 1, reason: i === 0 ? 'first' : 'retry', startedAtMs: T0, endedAtMs: T0 + 100, gateway: 'http://gw', status: 200, replayed: false, answered: true, clientCancelled: false, deltas: 5, ...a })) };
}

function row(generationId: string, over: Partial<LedgerRow> = {}): LedgerRow {
  return { generationId, requestId: generationId, tenantId: 'demo', modelRevision: 'chaos-reported@1', inputTokens: 7, outputTokens: 5, costNano: 64_000, status: 'completed', finishReason: 'stop', usageSource: 'reported', uncertain: false, ...over };
}

/** A clean run: one reported generation, answered and billed exactly. */
function clean(): ChaosEvidence {
  const p = plan('r1');
  return {
    budgetNano: BUDGET,
    requests: [client(p, [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 5 } }])],
    generations: [upstream('gen_1', 'r1', [{}])],
    kills: [],
    countingProcesses: ['all-in-one'],
    budgetSamples: [{ atMs: T0, source: 'db', settledNano: 64_000, reservedNano: 10_000, leasedNano: 0 }],
    final: { readAtMs: T0 + 60_000, ledger: [row('gen_1')], reconciled: new Set(), reservations: [], leases: [], idempotency: [] },
    reconcile: { exitCode: 0 },
    holdGraceMs: 15_000,
    reservedInput: () => 7,
  };
}

const broken = (e: ChaosEvidence): InvariantName[] => checkChaos(e).invariants.filter((i) => !i.ok).map((i) => i.name);

describe('checkChaos', () => {
  it('passes a clean run', () => {
    const verdict = checkChaos(clean());
    expect(verdict.invariants.map((i) => [i.name, i.ok])).toEqual(verdict.invariants.map((i) => [i.name, true]));
    expect(verdict.ok).toBe(true);
    expect(verdict.stats).toMatchObject({ requests: 1, answered: 1, producedTokens: 5, billedOutputTokens: 5 });
  });

  describe('billed-equals-produced', () => {
    it('wants the exact count where the upstream reported usage', () => {
      const e = clean();
      e.final.ledger = [row('gen_1', { outputTokens: 6 })];
      e.requests = [client(plan('r1'), [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 6 } }])];
      expect(broken(e)).toEqual(['billed-equals-produced']);
      const v = checkChaos(e).invariants[0].violations;
      expect(v.map((x) => x.message)).toEqual(['billed 6 output tokens, the upstream produced and reported 5', 'usage_source reported, but 6 ≠ 5 produced']);
      expect(v[0].context).toContain('r1 (chaos-reported, chat, stream, unkeyed');
    });

    it('wants the reported input tokens too', () => {
      const e = clean();
      e.final.ledger = [row('gen_1', { inputTokens: 18 })];
      e.requests = [client(plan('r1'), [{ generationId: 'gen_1', told: { inputTokens: 18, outputTokens: 5 } }])];
      e.reservedInput = () => 20;
      expect(broken(e)).toEqual(['billed-equals-produced']);
    });

    it('allows ±1 where Weir counted (no usage reached it), not ±2', () => {
      const e = clean();
      e.generations = [upstream('gen_1', 'r1', [{ flavour: 'no-usage', usageReported: 'none', produced: 5, ending: 'client_closed' }])];
      e.requests = [client(plan('r1', { alias: COUNTED_ALIAS }), [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 4 } }])];
      e.final.ledger = [row('gen_1', { outputTokens: 4, usageSource: 'counted' })];
      expect(broken(e)).toEqual([]);
      e.final.ledger = [row('gen_1', { outputTokens: 3, usageSource: 'counted' })];
      e.requests = [client(plan('r1', { alias: COUNTED_ALIAS }), [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 3 } }])];
      expect(broken(e)).toEqual(['billed-equals-produced']);
      // The right count under a label that claims the upstream reported it is still wrong.
      e.final.ledger = [row('gen_1', { outputTokens: 5, usageSource: 'reported' })];
      e.requests = [client(plan('r1', { alias: COUNTED_ALIAS }), [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 5 } }])];
      expect(checkChaos(e).invariants[0].violations.map((v) => v.message)).toEqual(['usage_source reported, but no usage reached Weir from the upstream (it must have counted: counted or estimated)']);
    });

    it('breaks when tokens were produced and no row bills them', () => {
      const e = clean();
      e.requests = [client(plan('r1'), [{ generationId: 'gen_1', answered: false, clientCancelled: true }])];
      e.final.ledger = [];
      expect(broken(e)).toEqual(['billed-equals-produced']);
      expect(checkChaos(e).invariants[0].violations[0].message).toBe('produced 5 output tokens, billed none (no usage row)');
    });

    it('where the counting process was killed mid-generation: no row, or an estimate never above what was produced', () => {
      const e = clean();
      e.kills = [{ target: 'all-in-one', atMs: T0 + 50 }];
      e.generations = [upstream('gen_1', 'r1', [{ ending: 'client_closed', endedAtMs: T0 + 51, produced: 5 }])];
      e.requests = [client(plan('r1'), [{ generationId: 'gen_1', answered: false, networkError: 'reset' }])];
      e.final.ledger = [];
      expect(broken(e)).toEqual([]);
      e.final.ledger = [row('gen_1', { outputTokens: 3, usageSource: 'estimated' })];
      expect(broken(e)).toEqual([]);
      e.final.ledger = [row('gen_1', { outputTokens: 6, usageSource: 'estimated' })];
      expect(broken(e)).toEqual(['billed-equals-produced']);
      // An under-count that claims to be exact is mislabelled.
      e.final.ledger = [row('gen_1', { outputTokens: 3, usageSource: 'reported' })];
      expect(broken(e)).toEqual(['billed-equals-produced']);
      // The older mark of an estimate (`uncertain`) is one too.
      e.final.ledger = [row('gen_1', { outputTokens: 3, usageSource: 'reported', uncertain: true })];
      expect(broken(e)).toEqual([]);
    });

    it('a kill of a process that does not count (the split ledger) changes nothing: exact is still wanted', () => {
      const e = clean();
      e.countingProcesses = ['relay'];
      e.kills = [{ target: 'ledger', atMs: T0 + 50 }];
      e.generations = [upstream('gen_1', 'r1', [{ ending: 'finished', produced: 5 }])];
      e.requests = [client(plan('r1'), [{ generationId: 'gen_1', answered: false, networkError: 'reset' }])];
      e.final.ledger = [];
      expect(broken(e)).toEqual(['billed-equals-produced']);
    });

    it('a generation the upstream never saw bills nothing', () => {
      const e = clean();
      e.reservedInput = () => 20;
      e.requests = [...e.requests, client(plan('r2'), [{ generationId: 'gen_2', status: 503, answered: false, errorCode: 'kill_switch' }])];
      e.final.ledger.push(row('gen_2', { inputTokens: 11, outputTokens: 0, status: 'cancelled' }));
      expect(broken(e)).toEqual(['billed-equals-produced']);
      e.final.ledger[1] = row('gen_2', { inputTokens: 0, outputTokens: 0, costNano: 0, status: 'failed' });
      expect(broken(e)).toEqual([]);
    });
  });

  it('input-within-reserved: more input than reserved breaks it', () => {
    const e = clean();
    e.reservedInput = () => 6;
    expect(broken(e)).toEqual(['input-within-reserved']);
    // A per-request reservation row, when there is one, is what was reserved.
    e.final.reservations = [{ id: 'res_1', generationId: 'gen_1', state: 'settled', inputTokens: 7, expiresAtMs: T0 }];
    expect(broken(e)).toEqual([]);
  });

  it('answered-exactly-one-row: an answered request without a row is lost', () => {
    const e = clean();
    e.final.ledger = [];
    e.generations = [];
    expect(broken(e)).toEqual(['answered-exactly-one-row']);
    expect(checkChaos(e).invariants[2].violations[0].message).toBe('answered (attempt #1, finish ?), no usage row: lost');
  });

  it('no-duplicates: one key billed by two rows breaks it; a second row that bills nothing does not', () => {
    const e = clean();
    const p = plan('r1', { key: 'k-1' });
    e.requests = [client(p, [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 5 } }, { generationId: 'gen_2', reason: 'repeat', told: { inputTokens: 7, outputTokens: 5 } }])];
    e.generations = [upstream('gen_1', 'r1', [{}]), upstream('gen_2', 'r1', [{}])];
    e.final.ledger = [row('gen_1', { requestId: 'k-1' }), row('gen_2', { requestId: 'k-1' })];
    expect(broken(e)).toEqual(['no-duplicates']);
    e.generations = [upstream('gen_1', 'r1', [{}]), upstream('gen_2', 'r1', [{ produced: 0, ending: 'refused' }])];
    e.final.ledger = [row('gen_1', { requestId: 'k-1' }), row('gen_2', { requestId: 'k-1', inputTokens: 0, outputTokens: 0, costNano: 0, status: 'failed' })];
    e.requests = [client(p, [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 5 } }])];
    expect(broken(e)).toEqual([]);
  });

  it('no-holds-past-expiry: a held reservation or a dead holder’s lease past expiry + grace breaks it, not before', () => {
    const e = clean();
    const now = e.final.readAtMs;
    e.final.reservations = [{ id: 'res_1', generationId: 'gen_1', state: 'held', inputTokens: 7, expiresAtMs: now - 10_000 }];
    expect(broken(e)).toEqual([]);
    e.final.reservations = [{ id: 'res_1', generationId: 'gen_1', state: 'held', inputTokens: 7, expiresAtMs: now - 20_000 }];
    expect(broken(e)).toEqual(['no-holds-past-expiry']);
    e.final.reservations = [];
    const lease = { leaseId: 'l1', holder: 'h1', kind: 'budget', scope: 'tenant:demo', outstandingNano: 5_000, slots: 0, holdUntilMs: now - 20_000 };
    e.final.leases = [{ ...lease, holderExpiresAtMs: now + 5_000 }];
    expect(broken(e)).toEqual([]); // its holder is alive
    e.final.leases = [{ ...lease, holderExpiresAtMs: now - 30_000 }];
    expect(broken(e)).toEqual(['no-holds-past-expiry']);
    e.final.leases = [{ ...lease, holderExpiresAtMs: null, outstandingNano: 0 }];
    expect(broken(e)).toEqual([]); // reclaimed: nothing outstanding
  });

  it('budget-never-exceeded: settled over the budget, or settled + reserved + leased over it, breaks it', () => {
    const e = clean();
    e.budgetSamples = [{ atMs: T0, source: 'db', settledNano: 600_000, reservedNano: 300_000, leasedNano: 100_000 }];
    expect(broken(e)).toEqual([]);
    e.budgetSamples = [{ atMs: T0, source: 'db', settledNano: 600_000, reservedNano: 300_000, leasedNano: 100_001 }];
    expect(broken(e)).toEqual(['budget-never-exceeded']);
    e.budgetSamples = [{ atMs: T0, source: 'usage-api', settledNano: BUDGET + 1, reservedNano: 0, leasedNano: 0 }];
    expect(broken(e)).toEqual(['budget-never-exceeded']);
  });

  it('told-equals-billed: a client told other counts than its row breaks it, unless the row is an estimate', () => {
    const e = clean();
    e.requests = [client(plan('r1'), [{ generationId: 'gen_1', told: { inputTokens: 7, outputTokens: 4 } }])];
    expect(broken(e)).toEqual(['told-equals-billed']);
    e.final.ledger = [row('gen_1', { usageSource: 'estimated', outputTokens: 5 })];
    expect(broken(e)).toEqual([]);
  });

  it('reconcile-clean: a reconciliation that fails or finds differences breaks it', () => {
    const e = clean();
    e.reconcile = { exitCode: 2, stderr: 'DATABASE_URL is required' };
    expect(broken(e)).toEqual(['reconcile-clean']);
    e.reconcile = { exitCode: 1, differences: [{ kind: 'cost' }] };
    expect(checkChaos(e).invariants.find((i) => i.name === 'reconcile-clean')?.violations[0].message).toContain('1 differences');
    e.reconcile = undefined;
    expect(broken(e)).toEqual(['reconcile-clean']);
  });
});
