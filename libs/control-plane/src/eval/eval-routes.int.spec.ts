import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import type { EvalGenerate } from './eval-types';
import { type EvalTestServer, startEvalServer } from './eval-test-support';

let database: TestDatabase;
let server: EvalTestServer;
let closes = 0;
const calls: string[] = [];
const gate: { release?: () => void } = {};

/** A fake port: the stable revision answers `<content>`, cand@2 the same, cand@3 upper-cased; `hold` blocks until released. */
const generate: EvalGenerate = async (revision, request) => {
  const content = request.messages[request.messages.length - 1].content;
  calls.push(revision);
  if (content === 'hold') await new Promise<void>((resolve) => (gate.release = resolve));
  if (request.outputSchema) return { text: revision === 'cand@3' ? '{"name": 7}' : '{"name": "Lily"}', ttftMs: 3, totalMs: 9 };
  return { text: revision === 'cand@3' ? content.toUpperCase() : content, ttftMs: revision === 'stable@1' ? 4 : 6, totalMs: 20 };
};

beforeAll(async () => {
  database = await createTestDatabase();
  const { db } = database;
  await db.insertInto('tenants').values([{ id: 'acme', name: 'Acme' }, { id: 'other', name: 'Other' }]).execute();
  await db.insertInto('model_revisions').values(['stable@1', 'cand@2', 'cand@3'].map((id) => ({ id, spec: JSON.stringify({ id }) }))).execute();
  await db
    .insertInto('model_aliases')
    .values([
      { id: 'story', spec: JSON.stringify({ name: 'story', targets: [{ revision: 'stable@1', weight: 95 }, { revision: 'cand@2', weight: 5 }] }) },
      { id: 'off', spec: JSON.stringify({ name: 'off', targets: [{ revision: 'stable@1', weight: 0 }] }) },
    ])
    .execute();
  server = await startEvalServer(
    { maxPromptsPerEval: 3 },
    {
      db,
      openGenerator: () => ({
        generate,
        close: async () => {
          closes += 1;
        },
      }),
    },
  );
}, 30_000);
afterAll(async () => {
  await server?.close();
  await database?.close();
});

const greeting = { use_case: 'support', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 8 };

describe('golden prompt routes', () => {
  it('creates, lists, reads, replaces and deletes a prompt, auditing each change', async () => {
    const created = await server.call('POST', '/tenants/acme/golden-prompts', { ...greeting, expected: 'hi' });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ tenant_id: 'acme', use_case: 'support', max_tokens: 8, output_schema: null, expected: 'hi' });
    const id = created.body.id as string;
    expect((await server.call('GET', '/tenants/acme/golden-prompts?use_case=support')).body.data.map((p: { id: string }) => p.id)).toEqual([id]);
    expect((await server.call('GET', '/tenants/acme/golden-prompts?use_case=none')).body.data).toEqual([]);
    expect((await server.call('GET', `/tenants/acme/golden-prompts/${id}`, undefined, 'viewer')).body.id).toBe(id);
    const replaced = await server.call('PUT', `/tenants/acme/golden-prompts/${id}`, { ...greeting, max_tokens: 12 });
    expect(replaced.body).toMatchObject({ id, max_tokens: 12, expected: null });
    // Another tenant's path never reaches it.
    expect((await server.call('GET', `/tenants/other/golden-prompts/${id}`)).status).toBe(404);
    expect((await server.call('DELETE', `/tenants/acme/golden-prompts/${id}`)).body).toEqual({ id, object: 'golden_prompt', deleted: true });
    expect((await server.call('GET', `/tenants/acme/golden-prompts/${id}`)).status).toBe(404);
    expect(server.audits.filter((a) => a.entityId === id).map((a) => [a.action, a.before === null, a.after === null])).toEqual([
      ['golden_prompt.create', true, false],
      ['golden_prompt.replace', false, false],
      ['golden_prompt.delete', false, true],
    ]);
  });

  it('stores the prompt as given but audits it redacted (a viewer reads the audit log)', async () => {
    const pii = 'mail jane.roe@example.org, card 4111 1111 1111 1111, key AKIAIOSFODNN7EXAMPLE';
    const body = { use_case: 'pii', messages: [{ role: 'user', content: pii }], max_tokens: 8, expected: 'ok jane.roe@example.org' };
    const created = await server.call('POST', '/tenants/acme/golden-prompts', body);
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    expect((await server.call('GET', `/tenants/acme/golden-prompts/${id}`)).body).toMatchObject({ messages: [{ role: 'user', content: pii }], expected: 'ok jane.roe@example.org' });
    await server.call('PUT', `/tenants/acme/golden-prompts/${id}`, body);
    await server.call('DELETE', `/tenants/acme/golden-prompts/${id}`);
    const audits = server.audits.filter((a) => a.entityId === id);
    expect(audits.map((a) => a.action)).toEqual(['golden_prompt.create', 'golden_prompt.replace', 'golden_prompt.delete']);
    expect(audits[0].after).toMatchObject({ id, use_case: 'pii', max_tokens: 8, messages: [{ role: 'user', content: 'mail [REDACTED:EMAIL], card [REDACTED:CARD], key [REDACTED:SECRET]' }], expected: 'ok [REDACTED:EMAIL]' });
    const text = JSON.stringify(audits);
    for (const raw of ['jane.roe@', '4111', 'AKIAIOSFODNN7EXAMPLE']) expect(text).not.toContain(raw);
  });

  it.each([
    [{ ...greeting, messages: [] }, 'messages'],
    [{ ...greeting, messages: [{ role: 'tool', content: 'x' }] }, 'messages.0.role'],
    [{ ...greeting, max_tokens: 0 }, 'max_tokens'],
    [{ ...greeting, use_case: '' }, 'use_case'],
    [{ ...greeting, output_schema: { type: 'object', requried: ['a'] } }, 'output_schema'],
    [{ ...greeting, temperature: 0 }, 'temperature'],
  ])('refuses a bad prompt %j (param %s)', async (body, param) => {
    const res = await server.call('POST', '/tenants/acme/golden-prompts', body);
    expect([res.status, res.body.error.code, res.body.error.param]).toEqual([400, 'invalid_request', param]);
  });

  it('404s an unknown tenant and lets a viewer only read', async () => {
    expect((await server.call('POST', '/tenants/nobody/golden-prompts', greeting)).status).toBe(404);
    expect((await server.call('POST', '/tenants/acme/golden-prompts', greeting, 'viewer')).status).toBe(403);
  });
});

describe('POST /admin/v1/evals', () => {
  beforeAll(async () => {
    for (const content of ['Once upon a time', 'Lily went to the park']) {
      await server.call('POST', '/tenants/acme/golden-prompts', { use_case: 'stories', messages: [{ role: 'user', content }], max_tokens: 16 });
    }
    const person = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
    await server.call('POST', '/tenants/acme/golden-prompts', { use_case: 'json', messages: [{ role: 'user', content: 'name?' }], max_tokens: 16, output_schema: person });
  });

  it('replays the set on the stable and candidate revisions and returns the passing report, stored and audited', async () => {
    calls.length = 0;
    const closesBefore = closes;
    const res = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'exact' } });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ status: 'finished', pass: true, stable_revision: 'stable@1', candidate_revision: 'cand@2', threshold: 1, scorer: { kind: 'exact', threshold: 1 } });
    expect(res.body.report.prompts.map((p: { stable: { output: string }; candidate: { output: string }; score: number }) => [p.stable.output, p.candidate.output, p.score])).toEqual([
      ['Once upon a time', 'Once upon a time', 1],
      ['Lily went to the park', 'Lily went to the park', 1],
    ]);
    expect(res.body.report.totals).toMatchObject({ prompts: 2, passed: 2, candidate_errors: 0, candidate: { ttft_p95_ms: 6 }, stable: { ttft_p95_ms: 4 } });
    expect(calls).toEqual(['stable@1', 'cand@2', 'stable@1', 'cand@2']);
    expect(closes).toBe(closesBefore + 1);
    expect((await server.call('GET', `/evals/${res.body.id}`, undefined, 'viewer')).body).toEqual(res.body);
    const audit = server.audits.find((a) => a.entityId === res.body.id);
    expect(audit).toMatchObject({ action: 'eval_run.create', entityType: 'eval_run', after: { pass: true, totals: { passed: 2 } } });
    // The audit entry carries no output text.
    expect(JSON.stringify(audit)).not.toContain('Once upon a time');
    const list = await server.call('GET', '/tenants/acme/evals');
    expect(list.body.data[0]).toMatchObject({ id: res.body.id, pass: true });
    expect(list.body.data[0].report).toBeUndefined();
  });

  it('fails the gate for a candidate that differs, by exact and by a similarity threshold', async () => {
    const exact = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@3', scorer: { kind: 'exact' } });
    expect([exact.status, exact.body.pass, exact.body.report.reasons]).toEqual([201, false, ['2 of 2 prompts scored below the threshold 1']]);
    // Upper case is equal after the similarity metrics' normalisation.
    const similar = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@3', scorer: { kind: 'similarity', threshold: 0.9 } });
    expect(similar.body.pass).toBe(true);
  });

  it('scores JSON-schema validity of the candidate', async () => {
    const good = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'json', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'json_schema' } });
    expect([good.body.pass, good.body.report.prompts[0].reference]).toEqual([true, 'none']);
    const bad = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'json', alias: 'story', candidate_revision: 'cand@3', scorer: { kind: 'json_schema' } });
    expect(bad.body.pass).toBe(false);
    expect(bad.body.report.prompts[0].detail).toMatch(/\/name/);
    const mixed = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'json_schema' } });
    expect([mixed.status, mixed.body.error.param]).toEqual([400, 'scorer']);
  });

  it.each([
    [{ tenant: 'nobody' }, 404, 'not_found'],
    [{ alias: 'nope' }, 404, 'not_found'],
    [{ alias: 'off' }, 409, 'conflict'],
    [{ candidate_revision: 'stable@1' }, 400, 'invalid_request'],
    [{ candidate_revision: 'ghost@9' }, 404, 'not_found'],
    [{ use_case: 'empty' }, 400, 'invalid_request'],
    [{ scorer: { kind: 'embedding', threshold: 0.9 } }, 400, 'invalid_request'],
    [{ scorer: undefined }, 400, 'invalid_request'],
    // A threshold of 0 passes any output; allowed_errors must leave at least one prompt to succeed (2 in the set).
    [{ scorer: { kind: 'similarity', threshold: 0 } }, 400, 'invalid_request'],
    // Nor may a similarity threshold sit barely above 0: one shared word would pass.
    [{ scorer: { kind: 'similarity', threshold: 1e-300 } }, 400, 'invalid_request'],
    [{ allowed_errors: 2 }, 400, 'invalid_request'],
    [{ allowed_errors: 10 }, 400, 'invalid_request'],
  ])('refuses %j before running (%d %s)', async (override, status, code) => {
    calls.length = 0;
    const res = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'exact' }, ...override });
    expect([res.status, res.body.error.code]).toEqual([status, code]);
    expect(calls).toEqual([]);
  });

  it('refuses allowed_errors that would let a candidate with no output pass, saying why, and stores no run', async () => {
    const before = (await server.call('GET', '/tenants/acme/evals')).body.data.length;
    const res = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'json', alias: 'story', candidate_revision: 'cand@3', scorer: { kind: 'json_schema' }, allowed_errors: 10 });
    expect([res.status, res.body.error.code, res.body.error.param]).toEqual([400, 'invalid_request', 'allowed_errors']);
    expect(res.body.error.message).toBe(
      'Use case json has 1 golden prompt: allowed_errors (10) must be less than the number of golden prompts replayed (1): at least one prompt must produce a scored candidate output for the gate to pass.',
    );
    expect((await server.call('GET', '/tenants/acme/evals')).body.data).toHaveLength(before);
    const ok = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'exact' }, allowed_errors: 1 });
    expect([ok.status, ok.body.pass, ok.body.report.allowed_errors]).toEqual([201, true, 1]);
  });

  it('caps the set size and the evals running at once', async () => {
    for (let i = 0; i < 4; i += 1) await server.call('POST', '/tenants/acme/golden-prompts', { use_case: 'big', messages: [{ role: 'user', content: `p${i}` }], max_tokens: 4 });
    const big = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'big', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'exact' } });
    expect([big.status, big.body.error.message]).toEqual([400, expect.stringMatching(/more than 3 golden prompts/)]);

    await server.call('POST', '/tenants/acme/golden-prompts', { use_case: 'slow', messages: [{ role: 'user', content: 'hold' }], max_tokens: 4 });
    const first = server.call('POST', '/evals', { tenant: 'acme', use_case: 'slow', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'exact' } });
    const held = async (): Promise<() => void> => {
      while (!gate.release) await new Promise((r) => setTimeout(r, 5));
      const release = gate.release;
      gate.release = undefined;
      return release;
    };
    // The first eval is inside its stable replay: another is refused meanwhile.
    const releaseStable = await held();
    const second = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'cand@2', scorer: { kind: 'exact' } });
    expect([second.status, second.body.error.code]).toEqual([429, 'rate_limited']);
    releaseStable();
    (await held())();
    expect((await first).body.pass).toBe(true);
  });
});
