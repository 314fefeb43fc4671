import { isWeirError } from '@weir/core';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { assertCanaryGate, DEFAULT_EVAL_MAX_AGE_MS, formerStableRevisions, lastAuditedAliasTargets } from './canary-gate';
import { armStatsByRevision } from './canary-stats';
import { type CanaryRollbackRequest, type CanaryRolledBackEvent, createCanaryGuard, targetsAfterRollback } from './canary-guard';
import { createEvalRunStore, createGoldenPromptStore } from './eval-store';
import type { EvalReport } from './eval-types';
import { assertPinGate } from './pin-gate';

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const MINUTE = 60_000;

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
  const { db } = database;
  await db.insertInto('tenants').values([{ id: 'acme', name: 'Acme' }, { id: 'other', name: 'Other' }]).execute();
  await db
    .insertInto('model_revisions')
    .values(['stable@1', 'cand@2', 'cand@3', 'cand@4'].map((id) => ({ id, spec: JSON.stringify({ id }), created_at: new Date(T0 - 10 * DAY) })))
    .execute();
}, 30_000);
afterAll(() => database?.close());

const DAY = 24 * 60 * MINUTE;

function passingReport(pass: boolean): EvalReport {
  return {
    scorer: { kind: 'exact', threshold: 1 },
    allowed_errors: 0,
    prompts: [],
    totals: {
      prompts: 1,
      passed: pass ? 1 : 0,
      failed: pass ? 0 : 1,
      unscored: 0,
      candidate_errors: 0,
      stable_errors: 0,
      mean_score: pass ? 1 : 0,
      candidate: { ttft_p50_ms: 1, ttft_p95_ms: 1, total_p50_ms: 1, total_p95_ms: 1 },
      stable: { ttft_p50_ms: 1, ttft_p95_ms: 1, total_p50_ms: 1, total_p95_ms: 1 },
    },
    pass,
    reasons: pass ? [] : ['1 of 1 prompts scored below the threshold 1'],
  };
}

async function setAlias(name: string, targets: Array<{ revision: string; weight: number }>): Promise<void> {
  await database.db
    .insertInto('model_aliases')
    .values({ id: name, spec: JSON.stringify({ name, targets }) })
    .onConflict((oc) => oc.column('id').doUpdateSet({ spec: JSON.stringify({ name, targets }) }))
    .execute();
}

describe('golden prompts and eval runs in Postgres', () => {
  it('keeps prompts per tenant and use case, with CRUD scoped to the tenant', async () => {
    const prompts = createGoldenPromptStore(database.db);
    const a = await prompts.create('acme', { use_case: 'support', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, output_schema: { type: 'object' }, expected: 'hello' });
    const b = await prompts.create('acme', { use_case: 'support', messages: [{ role: 'user', content: 'bye' }], max_tokens: 4 });
    await prompts.create('acme', { use_case: 'sales', messages: [{ role: 'user', content: 'buy' }], max_tokens: 4 });
    expect(a).toMatchObject({ tenant_id: 'acme', use_case: 'support', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, output_schema: { type: 'object' }, expected: 'hello' });
    expect(a.id).toMatch(/^gp_/);
    expect(b).toMatchObject({ output_schema: null, expected: null });
    expect((await prompts.list('acme', { useCase: 'support' })).map((p) => p.id)).toEqual([a.id, b.id]);
    expect(await prompts.list('acme')).toHaveLength(3);
    expect(await prompts.count('acme', 'support')).toBe(2);
    // Another tenant never sees, changes or deletes them.
    expect(await prompts.get('other', a.id)).toBeUndefined();
    expect(await prompts.replace('other', a.id, { use_case: 'x', messages: [], max_tokens: 1 })).toBeUndefined();
    expect(await prompts.remove('other', a.id)).toBeUndefined();
    const replaced = await prompts.replace('acme', a.id, { use_case: 'support', messages: [{ role: 'user', content: 'hi again' }], max_tokens: 9 });
    expect(replaced).toMatchObject({ id: a.id, created_at: a.created_at, max_tokens: 9, output_schema: null, expected: null });
    expect(await prompts.remove('acme', b.id)).toMatchObject({ id: b.id });
    expect(await prompts.get('acme', b.id)).toBeUndefined();
  });

  it('records a run from running to finished or failed', async () => {
    const runs = createEvalRunStore(database.db);
    const run = await runs.start({ tenant_id: 'acme', use_case: 'support', alias: 'story', candidate_revision: 'cand@2', stable_revision: 'stable@1', scorer: { kind: 'similarity', threshold: 0.8, metric: 'token_jaccard' } });
    expect(run).toMatchObject({ status: 'running', pass: null, report: null, finished_at: null, threshold: 0.8, scorer: { kind: 'similarity', threshold: 0.8, metric: 'token_jaccard' } });
    const finished = await runs.finish(run.id, passingReport(true));
    expect(finished).toMatchObject({ status: 'finished', pass: true, report: { pass: true } });
    expect(finished.finished_at).not.toBeNull();
    const other = await runs.start({ tenant_id: 'acme', use_case: 'support', alias: 'story', candidate_revision: 'cand@2', stable_revision: 'stable@1', scorer: { kind: 'exact', threshold: 1 } });
    expect(await runs.fail(other.id, { code: 'engine_unavailable', message: 'no engine' })).toMatchObject({ status: 'failed', pass: null, report: { error: { code: 'engine_unavailable' } } });
    expect((await runs.list('acme')).map((r) => r.id)).toEqual(expect.arrayContaining([run.id, other.id]));
    expect(await runs.get(run.id)).toEqual(finished);
  });
});

describe('assertCanaryGate', () => {
  const now = new Date(T0);
  const runs = () => createEvalRunStore(database.db);

  async function evalRun(alias: string, candidate: string, pass: boolean, createdAt: Date): Promise<string> {
    const run = await runs().start({ tenant_id: 'acme', use_case: 'support', alias, candidate_revision: candidate, stable_revision: 'stable@1', scorer: { kind: 'exact', threshold: 1 }, created_at: createdAt });
    await runs().finish(run.id, passingReport(pass));
    return run.id;
  }

  async function gateError(promise: Promise<unknown>): Promise<unknown> {
    return promise.then(
      () => undefined,
      (err: unknown) => err,
    );
  }

  it('refuses raising a canary without a passing eval, naming the revision, the alias and how to fix it', async () => {
    await setAlias('gate-a', [{ revision: 'stable@1', weight: 100 }]);
    await evalRun('gate-a', 'cand@2', false, new Date(T0 - MINUTE));
    // A passing eval on another alias does not count.
    await evalRun('gate-elsewhere', 'cand@2', true, new Date(T0 - MINUTE));
    const err = await gateError(assertCanaryGate({ db: database.db, alias: 'gate-a', newTargets: [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }], now }));
    expect(isWeirError(err) && [err.code, err.param]).toEqual(['conflict', 'targets']);
    expect((err as Error).message).toMatch(/canary revision cand@2 on alias gate-a to 10% of traffic \(from 0%\) needs a passing eval/);
    expect((err as Error).message).toMatch(/POST \/admin\/v1\/evals/);
  });

  it('lets it through with a recent passing eval and returns which eval', async () => {
    await setAlias('gate-b', [{ revision: 'stable@1', weight: 100 }]);
    const id = await evalRun('gate-b', 'cand@2', true, new Date(T0 - DAY));
    const gated = await assertCanaryGate({ db: database.db, alias: 'gate-b', newTargets: [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }], now });
    expect(gated).toEqual([{ revision: 'cand@2', share_before: 0, share_after: 0.1, eval_run_id: id }]);
  });

  it('ignores an eval older than the max age, or older than the revision', async () => {
    await setAlias('gate-c', [{ revision: 'stable@1', weight: 100 }]);
    await evalRun('gate-c', 'cand@2', true, new Date(T0 - DEFAULT_EVAL_MAX_AGE_MS - MINUTE));
    const raise = [{ revision: 'stable@1', weight: 50 }, { revision: 'cand@2', weight: 50 }];
    await expect(assertCanaryGate({ db: database.db, alias: 'gate-c', newTargets: raise, now })).rejects.toThrow(/no passing eval run of cand@2 on gate-c since 2026-02-22T12:00:00.000Z/);
    // A shorter max age applies too.
    const id = await evalRun('gate-c', 'cand@2', true, new Date(T0 - 2 * DAY));
    await expect(assertCanaryGate({ db: database.db, alias: 'gate-c', newTargets: raise, now, maxAgeMs: DAY })).rejects.toThrow(/conflict|needs a passing eval/);
    expect(await assertCanaryGate({ db: database.db, alias: 'gate-c', newTargets: raise, now })).toEqual([expect.objectContaining({ eval_run_id: id })]);
    // A revision created after the eval (the id re-registered) needs a new one.
    await database.db.updateTable('model_revisions').set({ created_at: new Date(T0 - DAY) }).where('id', '=', 'cand@3').execute();
    await evalRun('gate-c', 'cand@3', true, new Date(T0 - 2 * DAY));
    await expect(assertCanaryGate({ db: database.db, alias: 'gate-c', newTargets: [{ revision: 'stable@1', weight: 50 }, { revision: 'cand@3', weight: 50 }], now })).rejects.toThrow(
      /cand@3 on gate-c since 2026-02-28T12:00:00.000Z/,
    );
  });

  it('compares shares, not raw weights: lowering the stable weight is a raise; lowering a canary, a rollback or an equal share is not gated', async () => {
    await setAlias('gate-d', [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@3', weight: 10 }]);
    const gate = (newTargets: Array<{ revision: string; weight: number }>) => assertCanaryGate({ db: database.db, alias: 'gate-d', newTargets, now });
    await expect(gate([{ revision: 'stable@1', weight: 10 }, { revision: 'cand@3', weight: 10 }])).rejects.toThrow(/cand@3 on alias gate-d to 50% of traffic \(from 10%\)/);
    expect(await gate([{ revision: 'stable@1', weight: 180 }, { revision: 'cand@3', weight: 20 }])).toEqual([]);
    expect(await gate([{ revision: 'stable@1', weight: 95 }, { revision: 'cand@3', weight: 5 }])).toEqual([]);
    expect(await gate([{ revision: 'stable@1', weight: 100 }, { revision: 'cand@3', weight: 0 }])).toEqual([]);
    expect(await gate([{ revision: 'stable@1', weight: 100 }])).toEqual([]);
    // Raising the stable arm itself needs nothing.
    expect(await gate([{ revision: 'stable@1', weight: 1000 }, { revision: 'cand@3', weight: 10 }])).toEqual([]);
  });

  it.each([
    ['1e308 on both arms (their sum is Infinity)', [1e308, 1e308], 'targets[0].weight'],
    ['a weight above 1,000,000', [90, 1_000_001], 'targets[1].weight'],
    ['a negative weight', [100, -1], 'targets[1].weight'],
    ['NaN', [Number.NaN, 10], 'targets[0].weight'],
    ['Infinity', [90, Number.POSITIVE_INFINITY], 'targets[1].weight'],
  ])('refuses weights it cannot judge with 400: %s', async (_name, [w0, w1], param) => {
    await setAlias('gate-huge', [{ revision: 'stable@1', weight: 100 }]);
    const err = await gateError(assertCanaryGate({ db: database.db, alias: 'gate-huge', newTargets: [{ revision: 'stable@1', weight: w0 }, { revision: 'cand@2', weight: w1 }], now }));
    expect(isWeirError(err) && [err.code, err.param]).toEqual(['invalid_request', param]);
    expect((err as Error).message).toMatch(/must be a finite number from 0 to 1000000/);
  });

  it('reads shares of stored huge weights by their ratio, not as 0 of an Infinity total', async () => {
    // What a 1e308 PUT left behind before weights were bounded: equal arms, 50 % each.
    await setAlias('gate-junk', [{ revision: 'stable@1', weight: 1e308 }, { revision: 'cand@2', weight: 1e308 }]);
    const gate = (newTargets: Array<{ revision: string; weight: number }>) => assertCanaryGate({ db: database.db, alias: 'gate-junk', newTargets, now });
    expect(await gate([{ revision: 'stable@1', weight: 50 }, { revision: 'cand@2', weight: 50 }])).toEqual([]);
    await expect(gate([{ revision: 'stable@1', weight: 10 }, { revision: 'cand@2', weight: 90 }])).rejects.toThrow(/cand@2 on alias gate-junk to 90% of traffic \(from 50%\)/);
  });

  it('does not judge a revision that does not exist (configuration validation reports it)', async () => {
    await setAlias('gate-unknown', [{ revision: 'stable@1', weight: 100 }]);
    expect(await assertCanaryGate({ db: database.db, alias: 'gate-unknown', newTargets: [{ revision: 'stable@1', weight: 50 }, { revision: 'nope@1', weight: 50 }], now })).toEqual([]);
    // A known canary next to it is still gated.
    await expect(
      assertCanaryGate({ db: database.db, alias: 'gate-unknown', newTargets: [{ revision: 'nope@1', weight: 50 }, { revision: 'stable@1', weight: 40 }, { revision: 'cand@3', weight: 10 }], now }),
    ).rejects.toThrow(/cand@3 on alias gate-unknown/);
  });

  it("exempts a revision that was this alias's stable arm before, read from the alias's audit history across deletions", async () => {
    const audit = (action: string, before: unknown, after: unknown) =>
      database.db
        .insertInto('audit_log')
        .values({ at: new Date(T0 - DAY), actor_id: 'adm_x', actor_label: 'x', action, entity_type: 'alias', entity_id: 'gate-back', before: before === null ? null : JSON.stringify(before), after: after === null ? null : JSON.stringify(after), snapshot_version: 1 })
        .execute();
    const state = (spec: object) => ({ name: 'gate-back', spec: { name: 'gate-back', ...spec } });
    // An earlier alias of the same name had cand@2 as its stable arm; it was deleted.
    await audit('alias.create', null, state({ revision: 'cand@2' }));
    await audit('alias.delete', state({ revision: 'cand@2' }), null);
    // This alias: created on cand@3, cand@4 raised to a 10 % canary, then stable@1 promoted.
    await audit('alias.create', null, state({ revision: 'cand@3' }));
    await audit('alias.update', state({ revision: 'cand@3' }), state({ targets: [{ revision: 'cand@3', weight: 90 }, { revision: 'cand@4', weight: 10 }] }));
    await audit('alias.update', state({ targets: [{ revision: 'cand@3', weight: 90 }, { revision: 'cand@4', weight: 10 }] }), state({ targets: [{ revision: 'stable@1', weight: 100 }] }));
    await setAlias('gate-back', [{ revision: 'stable@1', weight: 100 }]);
    // The deleted namesake's stable arm counts: deleting an alias does not wipe what it served.
    expect([...(await formerStableRevisions(database.db, 'gate-back'))].sort()).toEqual(['cand@2', 'cand@3', 'stable@1']);

    const gate = (newTargets: Array<{ revision: string; weight: number }>) => assertCanaryGate({ db: database.db, alias: 'gate-back', newTargets, now });
    expect(await gate([{ revision: 'cand@3', weight: 100 }])).toEqual([{ revision: 'cand@3', share_before: 0, share_after: 1, eval_run_id: null, former_stable: true }]);
    expect(await gate([{ revision: 'cand@2', weight: 100 }])).toEqual([{ revision: 'cand@2', share_before: 0, share_after: 1, eval_run_id: null, former_stable: true }]);
    // Only ever a canary here: gated as any canary.
    const err = await gateError(gate([{ revision: 'stable@1', weight: 50 }, { revision: 'cand@4', weight: 50 }]));
    expect(isWeirError(err) && err.code).toBe('conflict');
    expect((err as Error).message).toContain('use POST /admin/v1/aliases/gate-back/rollback');
    // A passing eval is preferred as the record when there is one.
    const id = await evalRun('gate-back', 'cand@3', true, new Date(T0 - MINUTE));
    expect(await gate([{ revision: 'cand@3', weight: 100 }])).toEqual([{ revision: 'cand@3', share_before: 0, share_after: 1, eval_run_id: id }]);
  });

  it('judges an alias created again under a deleted name against its last audited targets; a name without history against nothing', async () => {
    const audit = (action: string, before: unknown, after: unknown) =>
      database.db
        .insertInto('audit_log')
        .values({ at: new Date(T0 - DAY), actor_id: 'adm_x', actor_label: 'x', action, entity_type: 'alias', entity_id: 'gate-gone', before: before === null ? null : JSON.stringify(before), after: after === null ? null : JSON.stringify(after), snapshot_version: 1 })
        .execute();
    const state = (spec: object) => ({ name: 'gate-gone', spec: { name: 'gate-gone', ...spec } });
    expect(await lastAuditedAliasTargets(database.db, 'gate-gone')).toBeUndefined();
    // A brand-new name: its stable arm is the new targets', not judged.
    expect(await assertCanaryGate({ db: database.db, alias: 'gate-gone', newTargets: [{ revision: 'cand@4', weight: 1 }], now })).toEqual([]);
    await audit('alias.create', null, state({ revision: 'stable@1' }));
    await audit('alias.update', state({ revision: 'stable@1' }), state({ targets: [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }] }));
    await audit('alias.delete', state({ targets: [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }] }), null);
    expect(await lastAuditedAliasTargets(database.db, 'gate-gone')).toEqual([{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }]);
    // The alias row is gone: the gate reads the state before the deletion.
    const gate = (newTargets: Array<{ revision: string; weight: number }>) => assertCanaryGate({ db: database.db, alias: 'gate-gone', newTargets, now });
    const err = await gateError(gate([{ revision: 'cand@4', weight: 1 }]));
    expect(isWeirError(err) && [err.code, err.param]).toEqual(['conflict', 'targets']);
    expect((err as Error).message).toMatch(/cand@4 on alias gate-gone to 100% of traffic \(from 0%\)/);
    expect((err as Error).message).toContain('gate-gone existed before and is judged against its arms before it was deleted');
    // The same arms again raise nothing; the canary's share growing still needs an eval.
    expect(await gate([{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }])).toEqual([]);
    await expect(gate([{ revision: 'stable@1', weight: 50 }, { revision: 'cand@2', weight: 50 }])).rejects.toThrow(/cand@2 on alias gate-gone to 50% of traffic \(from 10%\)/);
  });

  it('does not count a stored passing verdict whose report passed no prompt', async () => {
    await setAlias('gate-empty', [{ revision: 'stable@1', weight: 100 }]);
    const run = await runs().start({ tenant_id: 'acme', use_case: 'support', alias: 'gate-empty', candidate_revision: 'cand@2', stable_revision: 'stable@1', scorer: { kind: 'similarity', threshold: 0, metric: 'token_jaccard' }, created_at: new Date(T0 - MINUTE) });
    const report = passingReport(true);
    // What the runner stored before it required a scored success: pass with every prompt errored.
    await runs().finish(run.id, { ...report, allowed_errors: 10, totals: { ...report.totals, passed: 0, failed: 1, candidate_errors: 1, mean_score: null } });
    await expect(assertCanaryGate({ db: database.db, alias: 'gate-empty', newTargets: [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }], now })).rejects.toThrow(/needs a passing eval/);
  });

  it('takes the current targets from the caller when given, and gates each raised canary', async () => {
    const err = await gateError(
      assertCanaryGate({
        db: database.db,
        alias: 'gate-new',
        currentTargets: [],
        newTargets: [{ revision: 'stable@1', weight: 8 }, { revision: 'cand@3', weight: 2 }],
        now,
      }),
    );
    expect((err as Error).message).toMatch(/cand@3 on alias gate-new/);
  });
});

describe('assertPinGate', () => {
  const now = new Date(T0);
  const runs = () => createEvalRunStore(database.db);
  const routes = (...r: object[]) => r;

  it('judges only new or changed pins: the stable arm is free, another revision needs a fresh passing eval on that alias', async () => {
    await setAlias('pin-a', [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }]);
    const gate = (beforeRoutes: unknown, afterRoutes: unknown, maxAgeMs?: number) => assertPinGate({ db: database.db, beforeRoutes, afterRoutes, now, ...(maxAgeMs !== undefined ? { maxAgeMs } : {}) });
    expect(await gate(undefined, routes({ alias: 'pin-a', pin: 'stable@1' }))).toEqual([]);
    // A current canary arm is not the stable arm: a pin moves all of the tenant's traffic there.
    const err = await gate(undefined, routes({ alias: 'pin-a', fallbacks: ['cand@3'] }, { alias: 'pin-a', use_case: 'chat', pin: 'cand@2' })).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isWeirError(err) && [err.code, err.param]).toEqual(['conflict', 'routes[1].pin']);
    expect((err as Error).message).toMatch(/^Pinning alias pin-a for use case chat to revision cand@2 .* no passing eval run of cand@2 on pin-a since 2026-02-22T12:00:00.000Z/);
    // An unchanged pin (same alias and use case) and removals are not judged.
    expect(await gate(routes({ alias: 'pin-a', use_case: 'chat', pin: 'cand@2' }), routes({ alias: 'pin-a', use_case: 'chat', pin: 'cand@2' }))).toEqual([]);
    expect(await gate(routes({ alias: 'pin-a', pin: 'cand@2' }), [])).toEqual([]);
    // The same pin for another scope is new.
    await expect(gate(routes({ alias: 'pin-a', use_case: 'chat', pin: 'cand@2' }), routes({ alias: 'pin-a', pin: 'cand@2' }))).rejects.toThrow(/Pinning alias pin-a to revision cand@2/);
    // Unknown aliases and revisions are left to the configuration validation.
    expect(await gate(undefined, routes({ alias: 'nope', pin: 'cand@2' }, { alias: 'pin-a', pin: 'nope@1' }))).toEqual([]);

    // An eval on another alias does not count; one older than the max age neither.
    const start = (alias: string, createdAt: Date) => runs().start({ tenant_id: 'acme', use_case: 'support', alias, candidate_revision: 'cand@2', stable_revision: 'stable@1', scorer: { kind: 'exact', threshold: 1 }, created_at: createdAt });
    await runs().finish((await start('pin-elsewhere', new Date(T0 - MINUTE))).id, passingReport(true));
    const old = await start('pin-a', new Date(T0 - 2 * DAY));
    await runs().finish(old.id, passingReport(true));
    await expect(gate(undefined, routes({ alias: 'pin-a', pin: 'cand@2' }), DAY)).rejects.toThrow(/no passing eval run of cand@2 on pin-a/);
    expect(await gate(undefined, routes({ alias: 'pin-a', pin: 'cand@2' }))).toEqual([{ alias: 'pin-a', revision: 'cand@2', eval_run_id: old.id }]);
  });
});

describe('canary guard on the usage ledger', () => {
  let seq = 0;
  /** Inserts `n` ledger rows for an arm, finishing `agoMs` before T0, `failed` of them failed. */
  async function traffic(alias: string, revision: string, n: number, failed: number, ttftMs: number, agoMs = MINUTE): Promise<void> {
    const finished = new Date(T0 - agoMs);
    const rows = Array.from({ length: n }, (_, i) => {
      seq += 1;
      const fails = i < failed;
      return {
        generation_id: `gen_${seq}`,
        request_id: `req_${seq}`,
        tenant_id: 'acme',
        app_id: 'app',
        api_key_id: 'key',
        route: 'chat.completions',
        model_alias: alias,
        model_revision: revision,
        input_tokens: 5,
        output_tokens: fails ? 0 : 10,
        cached_input_tokens: 0,
        cost_usd: '0',
        status: fails ? 'failed' : 'completed',
        finish_reason: fails ? 'error' : 'stop',
        error_code: fails ? 'upstream_error' : null,
        queue_ms: 0,
        ttft_ms: fails ? null : ttftMs + (i % 10),
        total_ms: 100,
        started_at: new Date(finished.getTime() - 100),
        finished_at: finished,
      };
    });
    await database.db.insertInto('usage_ledger').values(rows).execute();
  }

  it('aggregates each arm over the window: rows, failures, first tokens, p95 TTFT', async () => {
    await traffic('stats', 'stable@1', 20, 2, 100);
    await traffic('stats', 'cand@2', 10, 0, 200);
    await traffic('stats', 'cand@2', 5, 5, 0, 10 * MINUTE); // outside a 5-minute window
    await traffic('other-alias', 'cand@2', 5, 5, 0);
    const stats = await armStatsByRevision(database.db, 'stats', new Date(T0 - 5 * MINUTE), new Date(T0));
    // stable ttft: 18 samples 100 + (i % 10) for i = 2..19 → 102..109, 100..109: p95 by linear interpolation.
    const stableTtft = Array.from({ length: 18 }, (_, k) => 100 + ((k + 2) % 10)).sort((a, b) => a - b);
    const rank = 0.95 * (stableTtft.length - 1);
    const p95 = stableTtft[Math.floor(rank)] + (rank - Math.floor(rank)) * (stableTtft[Math.ceil(rank)] - stableTtft[Math.floor(rank)]);
    expect(stats.get('stable@1')).toEqual({ n: 20, errors: 2, error_rate: 0.1, ttft_n: 18, p95_ttft_ms: p95 });
    expect(stats.get('cand@2')).toMatchObject({ n: 10, errors: 0, error_rate: 0, ttft_n: 10 });
    expect(stats.size).toBe(2);
  });

  it('rolls back a canary whose error rate regresses, once, with the event; keeps healthy and quiet canaries', async () => {
    await setAlias('guarded', [{ revision: 'stable@1', weight: 80 }, { revision: 'cand@2', weight: 10 }, { revision: 'cand@3', weight: 10 }]);
    await setAlias('quiet', [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }]);
    await traffic('guarded', 'stable@1', 200, 2, 100);
    await traffic('guarded', 'cand@2', 60, 15, 100); // 25% errors vs 1%
    await traffic('guarded', 'cand@3', 60, 1, 110); // healthy
    await traffic('quiet', 'stable@1', 200, 0, 100);
    await traffic('quiet', 'cand@2', 20, 20, 100); // all failing, but under 50 requests

    const rollbacks: CanaryRollbackRequest[] = [];
    const events: CanaryRolledBackEvent[] = [];
    const clock = { now: () => T0 };
    const guard = createCanaryGuard({
      db: database.db,
      clock,
      rollback: async (alias, request) => {
        rollbacks.push(request);
        // What the control plane's rollback does: the canary's weight to 0.
        const targets = targetsAfterRollback([{ revision: 'stable@1', weight: 80 }, { revision: 'cand@2', weight: 10 }, { revision: 'cand@3', weight: 10 }], request.revision);
        expect(targets).toEqual([{ revision: 'stable@1', weight: 80 }, { revision: 'cand@2', weight: 0 }, { revision: 'cand@3', weight: 10 }]);
        await setAlias(alias, targets);
      },
      onEvent: (event) => {
        events.push(event);
      },
    });
    const checks = await guard.check();
    const outcome = (alias: string, revision: string) => checks.find((c) => c.alias === alias && c.revision === revision)?.outcome;
    expect(outcome('guarded', 'cand@2')).toBe('rolled_back');
    expect(outcome('guarded', 'cand@3')).toBe('healthy');
    expect(outcome('quiet', 'cand@2')).toBe('not_enough_traffic');
    expect(rollbacks).toEqual([
      {
        alias: 'guarded',
        revision: 'cand@2',
        stable_revision: 'stable@1',
        trigger: 'error_rate',
        reason: 'error rate 25.0% vs stable 1.0% (+24.0% > +5.0% allowed) over 60 / 200 requests',
        actor: { id: 'system:canary-guard', label: 'automatic canary rollback' },
        canary: { error_rate: 0.25, p95_ttft_ms: expect.any(Number), n: 60 },
        stable: { error_rate: 0.01, p95_ttft_ms: expect.any(Number), n: 200 },
      },
    ]);
    expect(events).toEqual([
      {
        type: 'canary_rolled_back',
        alias: 'guarded',
        revision: 'cand@2',
        stable_revision: 'stable@1',
        trigger: 'error_rate',
        reason: rollbacks[0].reason,
        canary: rollbacks[0].canary,
        stable: rollbacks[0].stable,
        window: { from: new Date(T0 - 5 * MINUTE).toISOString(), to: new Date(T0).toISOString() },
        at: new Date(T0).toISOString(),
      },
    ]);
    // The next check sees weight 0: nothing more to roll back.
    await guard.check();
    expect(rollbacks).toHaveLength(1);
    await guard.stop();
  });

  it('rolls back on a p95 TTFT regression; retries when the rollback fails; a re-raised canary starts from a clean window', async () => {
    await setAlias('slow', [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }]);
    await traffic('slow', 'stable@1', 100, 0, 100);
    await traffic('slow', 'cand@2', 100, 0, 400);
    let now = T0;
    let failNext = true;
    const rollbacks: CanaryRollbackRequest[] = [];
    const errors: string[] = [];
    const guard = createCanaryGuard({
      db: database.db,
      clock: { now: () => now },
      logger: { warn: () => undefined, error: (_obj, msg) => errors.push(msg ?? '') },
      rollback: async (alias, request) => {
        if (failNext) {
          failNext = false;
          throw new Error('database is down');
        }
        rollbacks.push(request);
        await setAlias(alias, [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 0 }]);
      },
    });
    const slow = async () => (await guard.check()).find((c) => c.alias === 'slow');
    expect(await slow()).toMatchObject({ outcome: 'rollback_failed' });
    expect(errors).toEqual(['canary rollback failed; retrying on the next check']);
    expect(await slow()).toMatchObject({ outcome: 'rolled_back', reason: expect.stringMatching(/^p95 TTFT 40\d ms vs stable 10\d ms \(more than ×1.5\)/) });
    expect(rollbacks.map((r) => r.trigger)).toEqual(['p95_ttft']);

    // Raised again a minute later (after a new eval): the old slow rows no longer count.
    now = T0 + MINUTE;
    await setAlias('slow', [{ revision: 'stable@1', weight: 90 }, { revision: 'cand@2', weight: 10 }]);
    expect(await slow()).toMatchObject({ outcome: 'not_enough_traffic', canary: { n: 0 } });
    expect(rollbacks).toHaveLength(1);
  });
});
