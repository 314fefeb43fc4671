/**
 * Anthropic's Messages API on the running all-in-one, through the official `@anthropic-ai/sdk`
 * unchanged, on the real tiny model (stories260K on llama.cpp): `messages.create`,
 * `messages.stream` with `finalMessage()`, `messages.countTokens` (the revision's own tokenizer:
 * the same count the answer is billed for), and errors surfaced as the SDK's typed errors.
 * Small output limits keep it fast.
 */
import Anthropic from '@anthropic-ai/sdk';
import { tinyModelPath } from '@weir/testing';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_anthro01_' + 'A'.repeat(43);

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

const ASK: Anthropic.MessageParam[] = [{ role: 'user', content: 'Once upon a time, there was a little girl named Lily.' }];

describe('Anthropic Messages API on the real tiny model (all-in-one, official SDK)', () => {
  let running: TestPlatform | undefined;
  let client: Anthropic;

  beforeAll(async () => {
    running = await startTestPlatform('anthropic', CONFIG, DEMO_KEY);
    client = new Anthropic({ apiKey: DEMO_KEY, baseURL: (running.platform as Platform).url, maxRetries: 0, timeout: 60_000 });
  });

  afterAll(async () => {
    await running?.stop();
  });

  it('messages.create answers a message with text, a stop reason and usage; its input is billed at the count countTokens gives', async () => {
    // `temperature` (which Weir takes, as the Messages API long has) is not in this SDK's typed params: sent as an extra field.
    const params = { model: 'tiny-stories', max_tokens: 24, temperature: 0, system: 'You tell stories.', messages: ASK };
    const message = await client.messages.create(params);
    expect(message.type).toBe('message');
    expect(message.role).toBe('assistant');
    expect(message.model).toBe('tiny-stories');
    expect(message.id).toMatch(/^msg_/);
    expect(message.content).toHaveLength(1);
    const block = message.content[0];
    expect(block.type).toBe('text');
    expect((block as Anthropic.TextBlock).text.length).toBeGreaterThan(0);
    expect(['end_turn', 'max_tokens']).toContain(message.stop_reason);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    expect(message.usage.output_tokens).toBeLessThanOrEqual(24);

    const counted = await client.messages.countTokens({ model: 'tiny-stories', system: 'You tell stories.', messages: ASK });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(counted.input_tokens).toBe(message.usage.input_tokens);
  });

  it('messages.stream streams text the SDK assembles: finalMessage() equals the text events, as messages.create gives it at temperature 0', async () => {
    const params = { model: 'tiny-stories', max_tokens: 16, temperature: 0, messages: ASK };
    const whole = await client.messages.create(params);
    const stream = client.messages.stream(params);
    const pieces: string[] = [];
    stream.on('text', (t) => pieces.push(t));
    const final = await stream.finalMessage();
    expect(pieces.length).toBeGreaterThan(1);
    expect(final.content).toEqual([expect.objectContaining({ type: 'text', text: pieces.join('') })]);
    expect(final.content).toEqual(whole.content);
    expect(final.stop_reason).toBe(whole.stop_reason);
    expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
    expect(final.usage.input_tokens).toBe(whole.usage.input_tokens);
  });

  it('stop_sequences: the tiny model stops at one, and the answer says stop_reason stop_sequence and which', async () => {
    const base = { model: 'tiny-stories', max_tokens: 48, temperature: 0, messages: ASK };
    const free = await client.messages.create(base);
    const text = (free.content[0] as Anthropic.TextBlock).text;
    // A word the model writes after its first few: at temperature 0 it writes the same again and stops there.
    const stopWord = text.trim().split(/\s+/).find((w, i) => i >= 3 && /^[A-Za-z]{3,}$/.test(w)) as string;
    expect(stopWord).toBeDefined();
    const stopped = await client.messages.create({ ...base, stop_sequences: [stopWord] });
    expect(stopped.stop_reason).toBe('stop_sequence');
    expect(stopped.stop_sequence).toBe(stopWord);
    const cut = stopped.content.length > 0 ? (stopped.content[0] as Anthropic.TextBlock).text : '';
    expect(text.startsWith(cut)).toBe(true);
    expect(cut).not.toContain(stopWord);
    expect(free.stop_sequence).toBeNull();
  });

  it('surfaces errors as the SDK’s typed errors: an unknown model (NotFoundError), tools on a revision that cannot call them and a bad key', async () => {
    const unknown = client.messages.create({ model: 'no-such-model', max_tokens: 8, messages: ASK });
    await expect(unknown).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    await expect(unknown).rejects.toMatchObject({ status: 404, error: { type: 'error', error: { type: 'not_found_error' } } });

    const tools = client.messages.create({ model: 'tiny-stories', max_tokens: 8, messages: ASK, tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }] });
    await expect(tools).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    await expect(tools).rejects.toMatchObject({ error: { error: { type: 'invalid_request_error', message: expect.stringContaining('cannot call tools') } } });

    const stranger = new Anthropic({ apiKey: 'wk_anthro02_' + 'B'.repeat(43), baseURL: (running?.platform as Platform).url, maxRetries: 0 });
    await expect(stranger.messages.countTokens({ model: 'tiny-stories', messages: ASK })).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
  });
});
