/**
 * Structured output from the client libraries on the running all-in-one's real tiny model
 * (stories260K, a story model that cannot write JSON by itself; issue 16 part 3): the schemas
 * the `openai` SDK's zod helpers, the AI SDK and LangChain send (draft-07 or 2020-12, strict,
 * nullable unions, draft-07 `definitions` + `$ref`) become a llama.cpp grammar, so the model
 * answers JSON that matches and the client parses it. Small schemas and output limits keep it
 * fast; the prompts and temperatures vary, the verdict (a parsed object of the schema) does not.
 */
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { tinyModelPath } from '@weir/testing';
import { generateObject, streamObject } from 'ai';
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_zodclnt_' + 'Z'.repeat(43);

const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 64
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

/** Small enough for the tiny model to finish within its output limit: a bounded string and a nullable enum. */
const Pet = z.object({ name: z.string().max(16), kind: z.enum(['cat', 'dog']).nullable() });

/** A draft-07 schema with `definitions` + `$ref` and a `type` list with `null`, as hand-written or older zod-to-json-schema output. */
const DRAFT7_PET = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  type: 'object',
  properties: { name: { $ref: '#/definitions/shortName' }, kind: { type: ['string', 'null'], enum: ['cat', 'dog', null] } },
  required: ['name', 'kind'],
  additionalProperties: false,
  definitions: { shortName: { type: 'string', maxLength: 16 } },
};

describe('structured output from the client libraries on the real tiny model (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform | undefined;
  const baseURL = () => `${(platform as Platform).url}/v1`;

  beforeAll(async () => {
    running = await startTestPlatform('zodclients', CONFIG, DEMO_KEY);
    platform = running.platform;
  });

  afterAll(async () => {
    await running?.stop();
  });

  it('openai zodResponseFormat + chat.completions.parse: the draft-07 schema becomes a grammar and the answer parses', async () => {
    const client = new OpenAI({ baseURL: baseURL(), apiKey: DEMO_KEY, maxRetries: 0 });
    const format = zodResponseFormat(Pet, 'pet');
    expect(format.json_schema.schema).toMatchObject({ $schema: 'http://json-schema.org/draft-07/schema#' });
    const completion = await client.chat.completions.parse({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Name the cat.' }], max_tokens: 64, temperature: 0, response_format: format });
    expect(completion.choices[0].finish_reason).toBe('stop');
    expect(Pet.parse(completion.choices[0].message.parsed)).toEqual(completion.choices[0].message.parsed);
  });

  it('openai zodTextFormat + responses.stream: output_parsed', async () => {
    const client = new OpenAI({ baseURL: baseURL(), apiKey: DEMO_KEY, maxRetries: 0 });
    const stream = client.responses.stream({ model: 'tiny-stories', input: 'Tell me about the dog.', max_output_tokens: 64, temperature: 0.7, text: { format: zodTextFormat(Pet, 'pet') } });
    const final = await stream.finalResponse();
    expect(final.status).toBe('completed');
    expect(Pet.safeParse(final.output_parsed).success).toBe(true);
  });

  it('a draft-07 schema with definitions + $ref and a nullable type list, on chat', async () => {
    const client = new OpenAI({ baseURL: baseURL(), apiKey: DEMO_KEY, maxRetries: 0 });
    const completion = await client.chat.completions.create({
      model: 'tiny-stories',
      messages: [{ role: 'user', content: 'Once upon a time there was a pet.' }],
      max_tokens: 64,
      temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: DRAFT7_PET } },
    });
    const value = JSON.parse(completion.choices[0].message.content ?? '') as unknown;
    expect(Pet.safeParse(value).success).toBe(true);
  });

  it('a recursive zod schema (draft-07 definitions + a $ref cycle) becomes a recursive grammar: the model writes a matching tree', async () => {
    interface Part {
      name: string;
      parts: Part[];
    }
    const PartSchema: z.ZodType<Part> = z.object({ name: z.string().max(8), get parts() {
      return z.array(PartSchema).max(1);
    } });
    const format = zodResponseFormat(z.object({ root: PartSchema }), 'tree');
    expect(JSON.stringify(format.json_schema.schema)).toContain('"$ref":"#/definitions/');
    const client = new OpenAI({ baseURL: baseURL(), apiKey: DEMO_KEY, maxRetries: 0 });
    const completion = await client.chat.completions.parse({ model: 'tiny-stories', messages: [{ role: 'user', content: 'A toy had parts.' }], max_tokens: 96, temperature: 0, response_format: format });
    const parsed = completion.choices[0].message.parsed as { root: Part } | null;
    expect(typeof parsed?.root.name).toBe('string');
    expect(Array.isArray(parsed?.root.parts)).toBe(true);
  });

  it('AI SDK generateObject and streamObject (chat wire)', async () => {
    const provider = createOpenAI({ baseURL: baseURL(), apiKey: DEMO_KEY });
    const { object } = await generateObject({ model: provider.chat('tiny-stories'), schema: Pet, prompt: 'A girl had a pet.', maxOutputTokens: 64, temperature: 0, maxRetries: 0 });
    expect(Pet.safeParse(object).success).toBe(true);

    const result = streamObject({ model: provider.chat('tiny-stories'), schema: Pet, prompt: 'A boy had a pet.', maxOutputTokens: 64, temperature: 0, maxRetries: 0 });
    for await (const partial of result.partialObjectStream) void partial;
    expect(Pet.safeParse(await result.object).success).toBe(true);
  });

  it('LangChain withStructuredOutput (its 2020-12 schema with titles)', async () => {
    const model = new ChatOpenAI({ model: 'tiny-stories', apiKey: DEMO_KEY, configuration: { baseURL: baseURL() }, maxRetries: 0, maxTokens: 64, temperature: 0 });
    const pet = await model.withStructuredOutput(Pet).invoke('The cat sat on the mat.');
    expect(Pet.safeParse(pet).success).toBe(true);
  });
});
