import type { RevisionSpec } from '@weir/core';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { tinyModelPath } from '@weir/testing';
import { assertCanaryGate } from './canary-gate';
import { createEngineEvalGenerator } from './engine-generate';
import { type EvalTestServer, startEvalServer } from './eval-test-support';

/** Two revisions of the same tiny model (real llama.cpp, one thread): greedy replays must agree. */
function llamaRevision(id: string): RevisionSpec {
  return {
    id,
    model: 'stories260k',
    engine: { kind: 'llamacpp', modelPath: tinyModelPath(), threads: 1, sequences: 1, contextSize: 256, testTokenDelayMs: 0 },
    contextWindow: 256,
    maxOutputTokens: 128,
    defaultOutputTokens: 16,
    pricing: { inputPerMTok: 0, outputPerMTok: 0, cachedInputPerMTok: 0 },
  };
}
const revisions: Record<string, RevisionSpec> = { 'stories260k@1': llamaRevision('stories260k@1'), 'stories260k@2': llamaRevision('stories260k@2') };

let database: TestDatabase;
let server: EvalTestServer;
beforeAll(async () => {
  database = await createTestDatabase();
  const { db } = database;
  await db.insertInto('tenants').values({ id: 'acme', name: 'Acme' }).execute();
  await db.insertInto('model_revisions').values(Object.keys(revisions).map((id) => ({ id, spec: JSON.stringify({ id }) }))).execute();
  await db
    .insertInto('model_aliases')
    .values({ id: 'story', spec: JSON.stringify({ name: 'story', targets: [{ revision: 'stories260k@1', weight: 100 }, { revision: 'stories260k@2', weight: 0 }] }) })
    .execute();
  server = await startEvalServer({}, { db, openGenerator: () => createEngineEvalGenerator({ resolveRevision: (id) => revisions[id] }) });
}, 60_000);
afterAll(async () => {
  await server?.close();
  await database?.close();
});

describe('evals on the real llama.cpp engine (stories260K)', () => {
  it('exact match between two revisions of the same model passes with greedy decoding, and opens the canary gate', async () => {
    for (const content of ['Once upon a time', 'Lily and Tom went to the park']) {
      await server.call('POST', '/tenants/acme/golden-prompts', { use_case: 'stories', messages: [{ role: 'user', content }], max_tokens: 24 });
    }
    const res = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'stories', alias: 'story', candidate_revision: 'stories260k@2', scorer: { kind: 'exact' } });
    expect(res.status).toBe(201);
    expect(res.body.report.totals).toMatchObject({ prompts: 2, passed: 2, candidate_errors: 0, stable_errors: 0, mean_score: 1 });
    for (const p of res.body.report.prompts) {
      expect(p.candidate.output.length).toBeGreaterThan(0);
      expect(p.candidate.output).toBe(p.stable.output);
      expect(p.candidate.ttft_ms).not.toBeNull();
    }
    expect(res.body.pass).toBe(true);
    // The passing run lets the canary's weight rise.
    const gated = await assertCanaryGate({
      db: database.db,
      alias: 'story',
      newTargets: [
        { revision: 'stories260k@1', weight: 90 },
        { revision: 'stories260k@2', weight: 10 },
      ],
    });
    expect(gated).toEqual([{ revision: 'stories260k@2', share_before: 0, share_after: 0.1, eval_run_id: res.body.id }]);
  }, 60_000);

  it('scores JSON-schema validity: the grammar-constrained output of both revisions is valid', async () => {
    const person = { type: 'object', properties: { name: { type: 'string', maxLength: 20 } }, required: ['name'], additionalProperties: false };
    await server.call('POST', '/tenants/acme/golden-prompts', { use_case: 'json', messages: [{ role: 'user', content: 'Tell me the name of the girl.' }], max_tokens: 60, output_schema: person });
    const res = await server.call('POST', '/evals', { tenant: 'acme', use_case: 'json', alias: 'story', candidate_revision: 'stories260k@2', scorer: { kind: 'json_schema' } });
    expect(res.status).toBe(201);
    const [prompt] = res.body.report.prompts;
    expect(Object.keys(JSON.parse(prompt.candidate.output))).toEqual(['name']);
    expect([prompt.score, prompt.pass, res.body.pass]).toEqual([1, true, true]);
  }, 60_000);
});
