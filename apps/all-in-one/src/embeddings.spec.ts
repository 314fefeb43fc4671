/**
 * `POST /v1/embeddings` on the running all-in-one with the real tiny model as an embedding
 * revision (`kind: embedding`, a llama.cpp embedding context), through the official `openai`
 * client; the two kinds refused on each other's routes.
 */
import { tinyModelPath } from '@weir/testing';
import OpenAI from 'openai';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_embedd01_' + 'E'.repeat(43);
const model = JSON.stringify(tinyModelPath());
const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${model} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 16
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
  - id: stories260k-embed@1
    model: stories260k
    kind: embedding
    embedding: { dimensions: 64 }
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${model} }
    context_window: 512
    max_output_tokens: 1
    default_output_tokens: 1
    pricing: { input_per_mtok: 0.02, output_per_mtok: 0 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
  - name: tiny-embed
    revision: stories260k-embed@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 16 }
`;

describe('POST /v1/embeddings on the real tiny model (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform | undefined;
  let client: OpenAI;

  beforeAll(async () => {
    running = await startTestPlatform('embeddings', CONFIG, DEMO_KEY);
    platform = running.platform;
    client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${platform.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await running?.stop();
  });

  it('serves both revisions', () => {
    expect(platform?.warnings).toEqual([]);
    expect(platform?.aliases.sort()).toEqual(['tiny-embed', 'tiny-stories']);
  });

  it('embeds with the official client: 64 floats per input, the same text the same vector, usage in tokens', async () => {
    const r = await client.embeddings.create({ model: 'tiny-embed', input: ['Once upon a time', 'The dog ran home.', 'Once upon a time'] });
    expect(r.object).toBe('list');
    expect(r.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(r.data.every((d) => d.embedding.length === 64 && d.embedding.every(Number.isFinite))).toBe(true);
    expect(r.data[0].embedding).toEqual(r.data[2].embedding);
    expect(r.data[0].embedding).not.toEqual(r.data[1].embedding);
    expect(r.usage.prompt_tokens).toBeGreaterThan(6);
    expect(r.usage.total_tokens).toBe(r.usage.prompt_tokens);
    // The float and the base64 forms carry the same vector.
    const asFloat = await client.embeddings.create({ model: 'tiny-embed', input: 'Once upon a time', encoding_format: 'float' });
    expect(asFloat.data[0].embedding).toEqual(r.data[0].embedding);
  });

  it('embeds a batch whose total tokens pass one replica’s KV (2 × 512): the inputs are embedded one at a time', async () => {
    const r = await client.embeddings.create({ model: 'tiny-embed', input: Array.from({ length: 400 }, () => 'hi') });
    expect(r.data).toHaveLength(400);
    expect(r.usage.prompt_tokens).toBeGreaterThan(1024);
    expect(r.data[399].embedding).toEqual(r.data[0].embedding);
  });

  it('refuses each kind on the other kind’s route with a 400 naming the model', async () => {
    await expect(client.embeddings.create({ model: 'tiny-stories', input: 'hi' })).rejects.toMatchObject({ status: 400, param: 'model' });
    await expect(client.chat.completions.create({ model: 'tiny-embed', messages: [{ role: 'user', content: 'hi' }] })).rejects.toMatchObject({ status: 400, param: 'model' });
  });
});
