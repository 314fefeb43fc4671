/**
 * Use cases and session budgets on the running all-in-one (issue 16 items 7 and 6): the seed's
 * `POST /v1/responses` `{use_case, messages, max_tokens}` with no model answered by the real tiny
 * model through the use case's chain; a use case's monthly budget refusing it (429 naming it)
 * while another use case runs; an agent run's `x-weir-session-id` stopped at its app's session
 * cap while another run goes on — admission on budget leases as the all-in-one runs it.
 */
import { tinyModelPath } from '@weir/testing';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_usecase1_' + 'U'.repeat(43);

const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
  - id: sim@1
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1], [8, 2]], max_sequences: 8 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 4
    pricing: { input_per_mtok: 1000, output_per_mtok: 1000 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
  - name: sim
    revision: sim@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app, limits: { session_max_tokens: 100 } }]
    limits: { max_concurrent: 16 }
    use_cases:
      - { name: stories, model: tiny-stories }
      # A request of 16 output tokens costs at most about (input + 16) × $0.001: a few fit.
      - { name: capped, model: sim, limits: { monthly_budget_usd: 0.1 } }
      - { name: free, model: sim }
`;

describe('use cases and sessions on the all-in-one', () => {
  let running: TestPlatform | undefined;
  let platform: Platform | undefined;
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${(platform as Platform).url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
  const ask = (useCase: string, maxTokens: number) => ({ use_case: useCase, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: maxTokens });

  beforeAll(async () => {
    running = await startTestPlatform('use-cases', CONFIG, DEMO_KEY);
    platform = running.platform;
  });
  afterAll(async () => {
    await running?.stop();
  });

  it('answers the seed’s {use_case, messages, max_tokens} with no model, on the real tiny model', async () => {
    const res = await post('/v1/responses', ask('stories', 8));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model_used: string; output_text: string; usage: { output_tokens: number } };
    expect(body.model_used).toBe('stories260k@1');
    expect(body.usage.output_tokens).toBeGreaterThan(0);
    expect(body.output_text.length).toBeGreaterThan(0);
  });

  it('a use case’s monthly budget refuses it with a 429 naming it, while another use case runs', async () => {
    let refused: Response | undefined;
    for (let i = 0; i < 40 && !refused; i++) {
      const res = await post('/v1/chat/completions', ask('capped', 16));
      if (res.status === 429) refused = res;
      else expect(res.status).toBe(200);
    }
    expect(refused).toBeDefined();
    const { error } = (await (refused as Response).json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('budget_exhausted');
    expect(error.message).toMatch(/'capped' use case's monthly budget of \$0\.10 is exhausted/);
    expect((await post('/v1/chat/completions', ask('free', 16))).status).toBe(200);
  });

  it('an agent run stops at its app’s session cap with a 429 naming the session; another run goes on', async () => {
    let refused: Response | undefined;
    for (let i = 0; i < 20 && !refused; i++) {
      const res = await post('/v1/chat/completions', ask('free', 16), { 'x-weir-session-id': 'run-a' });
      if (res.status === 429) refused = res;
      else expect(res.status).toBe(200);
    }
    expect(refused).toBeDefined();
    const { error } = (await (refused as Response).json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('budget_exhausted');
    expect(error.message).toMatch(/^Session 'run-a' has reached its cap of 100 tokens/);
    expect((await post('/v1/chat/completions', ask('free', 16), { 'x-weir-session-id': 'run-b' })).status).toBe(200);
  });
});
