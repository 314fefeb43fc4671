/**
 * Issue 15, item 5, end to end on the all-in-one with the real tiny model (stories260K): tenant
 * `demo` logs content with the built-in `default` profile. Prompts carry an e-mail address, a
 * card number and an API key; the platform's log holds one `content` line per request with the
 * redacted prompt and the model's (redacted) output, and never the raw values. Turned off through
 * the admin API, the next request leaves no content in the log. With `redact_upstream`, the model
 * is sent the redacted prompt: the same prompt tokens and the same greedy answer as a request
 * that sends the redacted text itself.
 */
import { Writable } from 'node:stream';
import { tinyModelPath } from '@weir/testing';
import { createLogger } from '@weir/telemetry';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_redact01_' + 'R'.repeat(43);
const EMAIL = 'lily.smith@example.com';
const CARD = '4111 1111 1111 1111';
const KEY = 'sk-proj-Zx9Qp2Lm7Rt4Vb8Nc1Kd6Hs3';
const PROMPT = `Once upon a time Lily wrote to ${EMAIL} with card ${CARD} and key ${KEY}.`;
const REDACTED = 'Once upon a time Lily wrote to [REDACTED:EMAIL] with card [REDACTED:CARD] and key [REDACTED:SECRET].';

const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 16
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    content_logging: true
    redaction_profile: default
`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON lines and bodies
type Json = any;

describe('content logging and upstream redaction on the real tiny model (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform;
  let logged = '';
  const lines = (): Json[] => logged.split('\n').filter(Boolean).map((l) => JSON.parse(l));

  const chat = async (content: string) => {
    const res = await fetch(`${platform.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content }], max_tokens: 16, temperature: 0 }),
      signal: AbortSignal.timeout(60_000),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; completion_tokens: number } };
  };
  const setPolicy = async (patch: object) => {
    const res = await fetch(`${platform.url}/admin/v1/tenants/demo/policy`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${platform.adminToken as string}`, 'content-type': 'application/json' },
      body: JSON.stringify(patch),
    });
    expect(res.status).toBe(200);
    const version = Number(res.headers.get('x-weir-config-version'));
    await until(() => lines().some((l) => l.msg === 'configuration snapshot applied' && l.version >= version));
  };
  const until = async (pred: () => boolean) => {
    for (let i = 0; i < 500 && !pred(); i++) await new Promise((r) => setTimeout(r, 10));
    expect(pred()).toBe(true);
  };

  beforeAll(async () => {
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        logged += chunk.toString('utf8');
        done();
      },
    });
    running = await startTestPlatform('redact', CONFIG, DEMO_KEY, { logger: createLogger({ name: 'weir', level: 'info', destination }) });
    platform = running.platform;
  });

  afterAll(async () => {
    await running?.stop();
  });

  it('logs the redacted prompt and output, never the raw values; nothing once content logging is off', async () => {
    expect(platform.warnings).toEqual([]);
    const answer = await chat(PROMPT);
    const output = answer.choices[0].message.content;
    expect(output.length).toBeGreaterThan(0);
    await until(() => lines().some((l) => l.msg === 'content'));
    const content = lines().filter((l) => l.msg === 'content');
    expect(content).toHaveLength(1);
    expect(content[0]).toMatchObject({ tenant: 'demo', app: 'demo-app', profile: 'default', route: 'chat.completions', revision: 'stories260k@1', finishReason: 'length', prompt_redacted: `user: ${REDACTED}` });
    // The tiny model's story has no PII of its own: its output is logged as it came.
    expect(content[0].output_redacted).toBe(output);
    expect(content[0].outputTokens).toBe(answer.usage.completion_tokens);
    for (const raw of [EMAIL, CARD, KEY]) expect(logged).not.toContain(raw);
    // The redactions are counted by type on the ops port; no label holds content.
    const metrics = await (await fetch(`${platform.opsUrl as string}/metrics`)).text();
    for (const type of ['email', 'card', 'secret']) expect(metrics).toMatch(new RegExp(`^weir_redactions_total\\{[^}]*type="${type}"[^}]*surface="content_log"[^}]*\\} 1$`, 'm'));
    for (const raw of [EMAIL, CARD, KEY]) expect(metrics).not.toContain(raw);

    await setPolicy({ content_logging: false });
    const before = logged.length;
    await chat(PROMPT);
    await new Promise((r) => setTimeout(r, 200));
    const after = logged.slice(before);
    expect(after).not.toContain('"msg":"content"');
    expect(after).not.toContain('prompt_redacted');
    expect(after).not.toContain(output);
    for (const raw of [EMAIL, CARD, KEY]) expect(logged).not.toContain(raw);
  });

  it('redact_upstream: the model is sent the redacted prompt (same tokens and greedy answer as sending it redacted)', async () => {
    const plain = await chat(REDACTED);
    await setPolicy({ redact_upstream: true });
    const redacted = await chat(PROMPT);
    const raw = await chat(PROMPT.replace(EMAIL, 'lily@other.org'));
    expect(redacted.usage.prompt_tokens).toBe(plain.usage.prompt_tokens);
    expect(redacted.choices[0].message.content).toBe(plain.choices[0].message.content);
    // Another e-mail redacts to the same prompt: the model cannot tell them apart.
    expect(raw.choices[0].message.content).toBe(plain.choices[0].message.content);
    for (const v of [EMAIL, CARD, KEY]) expect(logged).not.toContain(v);
  });
});
