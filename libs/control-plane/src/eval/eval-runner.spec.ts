import { WeirError, isWeirError } from '@weir/core';
import type { EvalGenerate, EvalGenerateResult, GoldenPrompt } from './eval-types';
import { nearestRank, runEval } from './eval-runner';

function prompt(id: string, overrides: Partial<GoldenPrompt> = {}): GoldenPrompt {
  return {
    id,
    tenant_id: 'acme',
    use_case: 'support',
    messages: [{ role: 'user', content: `question ${id}` }],
    max_tokens: 16,
    output_schema: null,
    expected: null,
    created_at: '2025-01-01T00:00:00.000Z',
    ...overrides,
  };
}

/** A fake port: answers from a table keyed by `revision/prompt content`, recording calls. */
function fakeGenerate(answers: Record<string, Partial<EvalGenerateResult> | Error>): EvalGenerate & { calls: string[] } {
  const calls: string[] = [];
  const generate = async (revision: string, request: Parameters<EvalGenerate>[1]) => {
    const key = `${revision}/${request.messages[0].content}`;
    calls.push(`${key}/${request.maxTokens}/${request.outputSchema ? 'schema' : 'free'}`);
    const answer = answers[key];
    if (answer instanceof Error) throw answer;
    return { text: '', ttftMs: 10, totalMs: 20, ...answer };
  };
  return Object.assign(generate, { calls });
}

describe('runEval', () => {
  it('replays every prompt on stable then candidate and passes when every score reaches the threshold', async () => {
    const generate = fakeGenerate({
      'stable@1/question a': { text: 'Once upon a time', ttftMs: 5, totalMs: 50 },
      'cand@2/question a': { text: ' Once upon  a time\n', ttftMs: 7, totalMs: 70 },
      'stable@1/question b': { text: 'Lily', ttftMs: 6, totalMs: 60 },
      'cand@2/question b': { text: 'Lily', ttftMs: 9, totalMs: 90 },
    });
    const report = await runEval({ prompts: [prompt('a'), prompt('b', { max_tokens: 4 })], candidate: 'cand@2', stable: 'stable@1', scorer: { kind: 'exact', threshold: 1 }, generate });
    expect(generate.calls).toEqual(['stable@1/question a/16/free', 'cand@2/question a/16/free', 'stable@1/question b/4/free', 'cand@2/question b/4/free']);
    expect(report.pass).toBe(true);
    expect(report.reasons).toEqual([]);
    expect(report.prompts[0]).toEqual({
      prompt_id: 'a',
      stable: { revision: 'stable@1', output: 'Once upon a time', error: null, ttft_ms: 5, total_ms: 50 },
      candidate: { revision: 'cand@2', output: ' Once upon  a time\n', error: null, ttft_ms: 7, total_ms: 70 },
      reference: 'stable',
      score: 1,
      detail: null,
      pass: true,
    });
    expect(report.totals).toEqual({
      prompts: 2,
      passed: 2,
      failed: 0,
      unscored: 0,
      candidate_errors: 0,
      stable_errors: 0,
      mean_score: 1,
      candidate: { ttft_p50_ms: 7, ttft_p95_ms: 9, total_p50_ms: 70, total_p95_ms: 90 },
      stable: { ttft_p50_ms: 5, ttft_p95_ms: 6, total_p50_ms: 50, total_p95_ms: 60 },
    });
  });

  it('fails the gate on a score below the threshold', async () => {
    const generate = fakeGenerate({ 's/question a': { text: 'the cat sat' }, 'c/question a': { text: 'the dog sat' } });
    const strict = await runEval({ prompts: [prompt('a')], candidate: 'c', stable: 's', scorer: { kind: 'similarity', threshold: 0.6, metric: 'token_jaccard' }, generate });
    expect(strict.prompts[0]).toMatchObject({ score: 0.5, pass: false, detail: 'token_jaccard similarity 0.500' });
    expect(strict.pass).toBe(false);
    expect(strict.reasons).toEqual(['1 of 1 prompts scored below the threshold 0.6']);
    const lenient = await runEval({ prompts: [prompt('a')], candidate: 'c', stable: 's', scorer: { kind: 'similarity', threshold: 0.5, metric: 'token_jaccard' }, generate });
    expect(lenient.pass).toBe(true);
  });

  it('counts candidate errors against allowed_errors; a thrown port fault is an error too', async () => {
    const generate = fakeGenerate({
      's/question a': { text: 'x' },
      'c/question a': { text: '', ttftMs: null, error: { code: 'upstream_error', message: 'boom' } },
      's/question b': { text: 'y' },
      'c/question b': { text: 'y' },
      's/question c': { text: 'z' },
      'c/question c': new Error('socket hang up'),
    });
    const prompts = [prompt('a'), prompt('b'), prompt('c')];
    const report = await runEval({ prompts, candidate: 'c', stable: 's', scorer: { kind: 'exact', threshold: 1 }, generate });
    expect(report.prompts.map((p) => [p.prompt_id, p.score, p.pass, p.candidate.error?.code ?? null])).toEqual([
      ['a', null, false, 'upstream_error'],
      ['b', 1, true, null],
      ['c', null, false, 'internal'],
    ]);
    // The thrown fault's own message never reaches the report.
    expect(JSON.stringify(report)).not.toContain('socket hang up');
    expect(report.totals.candidate_errors).toBe(2);
    expect(report.pass).toBe(false);
    expect(report.reasons).toEqual(['the candidate failed on 2 prompts; at most 0 allowed']);
    const tolerant = await runEval({ prompts, candidate: 'c', stable: 's', scorer: { kind: 'exact', threshold: 1 }, allowedErrors: 2, generate });
    expect(tolerant.pass).toBe(true);
  });

  it('never passes without a scored candidate output: allowed_errors must stay below the number of prompts', async () => {
    // The tester's case: one prompt, a candidate whose model file is missing, allowed_errors 10.
    const generate = fakeGenerate({
      's/question a': { text: 'Once upon a time' },
      'c/question a': { text: '', ttftMs: null, error: { code: 'engine_unavailable', message: 'the model file does not exist' } },
      's/question b': { text: 'Lily' },
      'c/question b': { text: '', ttftMs: null, error: { code: 'engine_unavailable', message: 'the model file does not exist' } },
    });
    const scorer = { kind: 'similarity', threshold: 0.5, metric: 'token_jaccard' } as const;
    for (const [prompts, allowedErrors] of [
      [[prompt('a')], 10],
      [[prompt('a')], 1],
      [[prompt('a'), prompt('b')], 2],
      [[prompt('a')], -1],
      [[prompt('a'), prompt('b')], 0.5],
    ] as const) {
      const err = await runEval({ prompts, candidate: 'c', stable: 's', scorer, allowedErrors, generate }).catch((e: unknown) => e);
      expect(isWeirError(err) && [err.code, err.param]).toEqual(['invalid_request', 'allowed_errors']);
    }
    expect((await runEval({ prompts: [prompt('a')], candidate: 'c', stable: 's', scorer, allowedErrors: 1, generate }).catch((e: Error) => e.message)) as string).toMatch(
      /allowed_errors \(1\) must be less than the number of golden prompts replayed \(1\)/,
    );
    expect(generate.calls).toEqual([]);
    // Within the bound, a candidate that fails everywhere still fails the gate.
    const report = await runEval({ prompts: [prompt('a'), prompt('b')], candidate: 'c', stable: 's', scorer, allowedErrors: 1, generate });
    expect(report.totals).toMatchObject({ candidate_errors: 2, passed: 0, mean_score: null });
    expect(report.pass).toBe(false);
    expect(report.reasons).toEqual([
      'no candidate output was scored (2 candidate errors, 0 unscored of 2 prompts); a passing gate needs at least one',
      'the candidate failed on 2 prompts; at most 1 allowed',
    ]);
  });

  it("compares with the prompt's expected answer when the stable revision fails, else leaves it unscored", async () => {
    const generate = fakeGenerate({
      's/question a': { error: { code: 'upstream_timeout', message: 't' } },
      'c/question a': { text: 'forty two' },
      's/question b': { error: { code: 'upstream_timeout', message: 't' } },
      'c/question b': { text: 'anything' },
    });
    const report = await runEval({
      prompts: [prompt('a', { expected: 'forty  two' }), prompt('b')],
      candidate: 'c',
      stable: 's',
      scorer: { kind: 'exact', threshold: 1 },
      generate,
    });
    expect(report.prompts.map((p) => [p.reference, p.score, p.pass])).toEqual([
      ['expected', 1, true],
      ['none', null, false],
    ]);
    expect(report.totals).toMatchObject({ stable_errors: 2, unscored: 1, passed: 1 });
    expect(report.pass).toBe(false);
  });

  it('json_schema validates the candidate alone and passes the schema to the port', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    const generate = fakeGenerate({
      's/question a': { text: 'not json' },
      'c/question a': { text: '{"n": 3}' },
      's/question b': { text: '{"n": 1}' },
      'c/question b': { text: '{"n": "three"}' },
    });
    const report = await runEval({
      prompts: [prompt('a', { output_schema: schema }), prompt('b', { output_schema: schema })],
      candidate: 'c',
      stable: 's',
      scorer: { kind: 'json_schema', threshold: 1 },
      generate,
    });
    expect(generate.calls.every((c) => c.endsWith('/schema'))).toBe(true);
    expect(report.prompts.map((p) => [p.reference, p.score])).toEqual([
      ['none', 1],
      ['none', 0],
    ]);
    expect(report.prompts[1].detail).toMatch(/\/n/);
    expect(report.pass).toBe(false);
  });

  it('refuses an empty set and a json_schema run over prompts without a schema, before generating', async () => {
    const generate = fakeGenerate({});
    await expect(runEval({ prompts: [], candidate: 'c', stable: 's', scorer: { kind: 'exact', threshold: 1 }, generate })).rejects.toThrow(/no golden prompts/);
    const err = await runEval({ prompts: [prompt('a')], candidate: 'c', stable: 's', scorer: { kind: 'json_schema', threshold: 1 }, generate }).catch((e: unknown) => e);
    expect(isWeirError(err) && [err.code, err.param]).toEqual(['invalid_request', 'scorer']);
    expect(generate.calls).toEqual([]);
  });

  it('aborts a replay at the call timeout and reports it as an error', async () => {
    const generate: EvalGenerate = (_revision, request) =>
      new Promise((resolve) => {
        request.signal.addEventListener('abort', () => resolve({ text: 'partial', ttftMs: 1, totalMs: 30 }));
      });
    const report = await runEval({ prompts: [prompt('a')], candidate: 'c', stable: 's', scorer: { kind: 'exact', threshold: 1 }, generate, callTimeoutMs: 20 });
    expect(report.prompts[0].stable.error).toEqual({ code: 'deadline_exceeded', message: 'no complete answer within 20 ms' });
    expect(report.prompts[0].candidate.error?.code).toBe('deadline_exceeded');
    expect(report.pass).toBe(false);
  });

  it('keeps a WeirError thrown by the port as its code and public message', async () => {
    const generate: EvalGenerate = async (revision) => {
      if (revision === 'c') throw new WeirError('model_not_found', 'revision c does not exist');
      return { text: 'x', ttftMs: 1, totalMs: 2 };
    };
    const report = await runEval({ prompts: [prompt('a')], candidate: 'c', stable: 's', scorer: { kind: 'exact', threshold: 1 }, generate });
    expect(report.prompts[0].candidate.error).toEqual({ code: 'model_not_found', message: 'revision c does not exist' });
  });

  it.each([
    [[], 0.95, null],
    [[5], 0.95, 5],
    [[1, 2, 3, 4], 0.5, 2],
    [[10, 1, 9, 2, 8, 3, 7, 4, 6, 5], 0.95, 10],
    [[10, 1, 9, 2, 8, 3, 7, 4, 6, 5], 0.9, 9],
  ])('nearestRank(%j, %d) = %j', (samples, p, expected) => {
    expect(nearestRank(samples, p)).toBe(expected);
  });
});
