/**
 * Moderation on the running all-in-one with the real tiny model (stories260K, issue 15): a rules
 * policy set through the admin API reaches the gateway and the relay in a snapshot; output
 * moderation cuts a tiny-stories answer before a word it writes, on a streamed and a
 * non-streamed chat completion; input moderation refuses a flagged prompt with 400
 * `content_filter`. The word is picked from the model's own answer, after its first window.
 */
import OpenAI from 'openai';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';
import { tinyModelPath } from '@weir/testing';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_moderat1_' + 'M'.repeat(43);
const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 16 }
`;
const ASK = { model: 'tiny-stories', temperature: 0, max_tokens: 64, messages: [{ role: 'user' as const, content: 'Once upon a time' }] };

describe('moderation on the real tiny model (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform;
  let client: OpenAI;
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${platform.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${platform.adminToken}`, 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });

  beforeAll(async () => {
    running = await startTestPlatform('moderation', CONFIG, DEMO_KEY);
    platform = running.platform;
    client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${platform.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await running?.stop();
  });

  it('cuts a story before a word it writes, streamed and not, and refuses a flagged prompt', async () => {
    const plain = await client.chat.completions.create(ASK);
    const story = plain.choices[0].message.content ?? '';
    // A word of the story first written after its first 40 characters (so some text is released before the cut).
    const words = [...story.matchAll(/[A-Za-z]{3,}/g)];
    const pick = words.find((m) => (m.index ?? 0) >= 40 && story.toLowerCase().indexOf(m[0].toLowerCase()) === m.index && !/^(the|and|was|she|her|his|him|they|had|but|you|for|with)$/i.test(m[0]));
    expect(pick).toBeDefined();
    const word = (pick as RegExpMatchArray)[0];
    const flaggedWord = new RegExp(`\\b${word}\\b`, 'i');

    const set = await admin('PATCH', '/tenants/demo/policy', {
      moderation: {
        input: { engine: 'rules', fail: 'closed' },
        output: { engine: 'rules', window_chars: 32, overlap_chars: 16 },
        rules: { lists: [{ category: 'custom', phrases: [word, 'purple dragon'] }] },
      },
    });
    expect(set.status).toBe(200);

    // The snapshot is applied in the background: wait for the policy to take effect.
    let cut: OpenAI.Chat.Completions.ChatCompletion | undefined;
    for (let i = 0; i < 50 && !cut; i++) {
      const r = await client.chat.completions.create(ASK);
      if (r.choices[0].finish_reason === 'content_filter') cut = r;
      else await new Promise((res) => setTimeout(res, 100));
    }
    expect(cut).toBeDefined();
    const cutText = cut?.choices[0].message.content ?? '';
    expect(cutText).not.toMatch(flaggedWord);
    expect(cutText.length).toBeLessThan(story.length);
    expect(cut?.usage?.completion_tokens).toBeGreaterThan(0);

    const stream = await client.chat.completions.create({ ...ASK, stream: true, stream_options: { include_usage: true } });
    let text = '';
    const finishes: string[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason);
      if (chunk.usage) usage = chunk.usage;
    }
    expect(finishes).toEqual(['content_filter']);
    expect(text).not.toMatch(flaggedWord);
    expect(usage?.completion_tokens).toBeGreaterThan(0);

    const blocked = await fetch(`${platform.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...ASK, stream: true, messages: [{ role: 'user', content: 'Once upon a time a PURPLE   dragon' }] }),
    });
    expect(blocked.status).toBe(400);
    expect(((await blocked.json()) as { error: { code: string } }).error.code).toBe('content_filter');

    const verdicts = await client.moderations.create({ input: [`a ${word} here`, 'nothing'] });
    expect(verdicts.results.map((r) => r.flagged)).toEqual([true, false]);
  });
});
