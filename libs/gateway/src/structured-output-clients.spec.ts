/**
 * Structured output as clients send it (issue 16 part 3), through the whole request path over
 * HTTP — the real gateway, pipeline, schema worker and relay, and the real OpenAI-compatible
 * adapter on a scripted upstream — with the exact client libraries: the `openai` SDK's zod
 * helpers (`zodResponseFormat` + `chat.completions.parse`/`stream`, `zodTextFormat` +
 * `responses.parse`/`stream`), the AI SDK (`generateObject`, `streamObject`, on the chat and the
 * Responses wires) and LangChain (`withStructuredOutput`, invoke and stream). They send draft-07
 * (`openai`, AI SDK) or 2020-12 (LangChain) schemas with `strict: true`,
 * `additionalProperties: false`, nullable unions and `definitions` + `$ref`.
 *
 * The scripted upstream answers what the last user message asks (`REPLY:<text>`), so each test
 * says whether the model writes matching JSON, JSON that does not match, or no JSON at all: the
 * first is served as is and parsed by the client; the others are Weir's `output_invalid` (502,
 * `x-should-retry: false`, billed), never a success.
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { PlatformConfig, RevisionSpec } from '@weir/core';
import { createOpenAICompatibleEngine } from '@weir/engines';
import { chatStreamEvents, type RecordedRequest, type ScriptedUpstream, sseReply, startScriptedUpstream } from '@weir/testing';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, streamObject } from 'ai';
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** A revision on the scripted upstream that declares JSON-schema output (the upstream constrains it). */
function upstreamRevision(url: string): RevisionSpec {
  return {
    id: 'up@1',
    model: 'up',
    engine: { kind: 'openai-compatible', baseUrl: url, upstreamModel: 'm', api: 'chat', firstTokenTimeoutMs: 5_000, idleTimeoutMs: 5_000, maxConcurrency: 8 },
    contextWindow: 8_192,
    maxOutputTokens: 256,
    defaultOutputTokens: 128,
    pricing: { inputPerMTok: 1_000, outputPerMTok: 2_000, cachedInputPerMTok: 1_000 },
    capabilities: { streaming: true, tools: false, jsonOutput: true },
  };
}

/** The text of the request's last message (a string, or its text parts). */
function lastMessageText(request: RecordedRequest): string {
  const messages = (request.body as { messages?: { content?: unknown }[] }).messages ?? [];
  const content = messages.at(-1)?.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => (p as { text?: string }).text ?? '').join('');
  return '';
}

/** The prompt that makes the scripted upstream answer `text` (in 5-character pieces). */
const reply = (text: string) => `REPLY:${text}`;

const Person = z.object({ name: z.string(), age: z.number().int().nullable(), tags: z.array(z.string()) });
const ANN = { name: 'Ann', age: null, tags: ['a', 'b'] };

/** A recursive zod schema: the helpers send it as draft-07 `definitions` + `$ref`. */
interface TreeNode {
  label: string;
  children: TreeNode[];
}
const Node: z.ZodType<TreeNode> = z.object({ label: z.string(), get children() {
  return z.array(Node);
} });
const Tree = z.object({ root: Node, note: z.string().nullable() });
const TREE = { root: { label: 'a', children: [{ label: 'b', children: [] }] }, note: null };

describe('structured output from the client libraries (scripted OpenAI-compatible upstream)', () => {
  let upstream: ScriptedUpstream;
  let gw: TestGateway;
  let client: OpenAI;
  /** The `response_format` each upstream request carried, in order. */
  const sentFormats = () => upstream.requests.map((r) => (r.body as { response_format?: { json_schema?: { schema?: unknown } } }).response_format);

  beforeAll(async () => {
    upstream = await startScriptedUpstream({
      script: (request) => {
        const text = /^REPLY:([\s\S]*)$/.exec(lastMessageText(request))?.[1] ?? 'Once upon a time';
        return sseReply(chatStreamEvents(text.match(/[\s\S]{1,5}/g) ?? []));
      },
    });
    const revision = upstreamRevision(upstream.url);
    const base = twoTenantConfig(revision);
    // Schemas with titles and definitions are larger than the small test body limit.
    const config: PlatformConfig = { ...base, defaults: { ...base.defaults, maxBodyBytes: 64 * 1024 } };
    const engine = createOpenAICompatibleEngine(revision.engine as Extract<RevisionSpec['engine'], { kind: 'openai-compatible' }>, { env: {} });
    gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }) });
    client = new OpenAI({ apiKey: gw.key.plaintext, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });
  beforeEach(() => {
    upstream.requests.length = 0;
    gw.records.length = 0;
  });

  async function settledRecords(n: number) {
    for (let i = 0; i < 200 && gw.records.length < n; i++) await new Promise((r) => setTimeout(r, 10));
    return gw.records;
  }

  describe('every entry point reads each draft', () => {
    const D7_TREE = zodResponseFormat(Tree, 'tree').json_schema.schema as Record<string, unknown>;
    const D2019 = { $schema: 'https://json-schema.org/draft/2019-09/schema#', type: 'object', properties: { pair: { type: 'array', items: [{ type: 'string' }, { type: 'integer' }], additionalItems: false } }, required: ['pair'] };

    it("Weir's output_schema takes a draft-07 schema (definitions + $ref) and a 2019-09 tuple, streamed and not", async () => {
      const weir = (schema: object, text: string, stream = false) =>
        gw.post('/v1/responses', { model: 'fake', use_case: 'extract', max_tokens: 64, messages: [{ role: 'user', content: reply(text) }], output_schema: schema, ...(stream ? { stream: true } : {}) });
      const tree = await weir(D7_TREE, JSON.stringify(TREE));
      expect(tree.status).toBe(200);
      expect(((await tree.json()) as { output: unknown }).output).toEqual(TREE);
      const pair = await weir(D2019, '{"pair":["a",1]}', true);
      const events = await pair.text();
      expect(events).toContain('"output":{"pair":["a",1]}');
      const tooLong = await weir(D2019, '{"pair":["a",1,2]}');
      expect(tooLong.status).toBe(502);
      expect(((await tooLong.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: 'output_invalid', message: expect.stringMatching(/`\/pair` must NOT have more than 2 items/) });
      expect(sentFormats()[0]?.json_schema?.schema).toEqual(D7_TREE);
    });

    it.each([
      ['/v1/chat/completions', 'response_format.json_schema.schema', (schema: object) => ({ model: 'fake', messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_schema', json_schema: { name: 'p', strict: true, schema } } })],
      ['/v1/responses', 'text.format.schema', (schema: object) => ({ model: 'fake', input: 'hi', text: { format: { type: 'json_schema', name: 'p', strict: true, schema } } })],
      ['/v1/responses', 'output_schema', (schema: object) => ({ model: 'fake', use_case: 'extract', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], output_schema: schema })],
    ])('%s refuses an unknown $schema (%s) with a 400 listing the accepted URIs, before the upstream', async (path, param, body) => {
      const res = await gw.post(path, body({ $schema: 'http://json-schema.org/draft-04/schema#', type: 'object', properties: { a: { type: 'string' } } }));
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { code: string; param: string; message: string } };
      expect(error).toMatchObject({ code: 'invalid_request', param });
      expect(error.message).toContain('"http://json-schema.org/draft-04/schema#") names no supported draft; use one of "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2019-09/schema", "https://json-schema.org/draft/2020-12/schema"');
      expect(upstream.requests).toEqual([]);
    });
  });

  describe('openai SDK zod helpers', () => {
    it('zodResponseFormat + chat.completions.parse: the draft-07 schema reaches the upstream unchanged and the answer is parsed', async () => {
      const format = zodResponseFormat(Person, 'person');
      expect(format.json_schema.schema).toMatchObject({ $schema: 'http://json-schema.org/draft-07/schema#', additionalProperties: false });
      expect(format.json_schema.strict).toBe(true);
      const completion = await client.chat.completions.parse({ model: 'fake', messages: [{ role: 'user', content: reply(JSON.stringify(ANN)) }], response_format: format });
      expect(completion.choices[0].message.parsed).toEqual(ANN);
      expect(sentFormats()).toEqual([{ type: 'json_schema', json_schema: { name: 'output', schema: format.json_schema.schema, strict: true } }]);
    });

    it('a recursive schema (definitions + $ref) is accepted, constrained and checked, nested levels included', async () => {
      const format = zodResponseFormat(Tree, 'tree');
      expect(JSON.stringify(format.json_schema.schema)).toContain('"$ref":"#/definitions/');
      const completion = await client.chat.completions.parse({ model: 'fake', messages: [{ role: 'user', content: reply(JSON.stringify(TREE)) }], response_format: format });
      expect(completion.choices[0].message.parsed).toEqual(TREE);
      expect(sentFormats()[0]?.json_schema?.schema).toEqual(format.json_schema.schema);

      const deepMiss = { root: { label: 'a', children: [{ label: 'b' }] }, note: null };
      await expect(client.chat.completions.parse({ model: 'fake', messages: [{ role: 'user', content: reply(JSON.stringify(deepMiss)) }], response_format: format })).rejects.toMatchObject({
        status: 502,
        code: 'output_invalid',
        message: expect.stringMatching(/`\/root\/children\/0` must have required property 'children'/),
      });
    });

    it('zodResponseFormat streamed: chat.completions.stream gives the parsed final completion', async () => {
      const stream = client.chat.completions.stream({ model: 'fake', messages: [{ role: 'user', content: reply(JSON.stringify(ANN)) }], response_format: zodResponseFormat(Person, 'person') });
      let deltas = 0;
      stream.on('content.delta', () => deltas++);
      const final = await stream.finalChatCompletion();
      expect(final.choices[0].message.parsed).toEqual(ANN);
      expect(deltas).toBeGreaterThan(3);
    });

    it('an upstream answer that is not JSON is output_invalid (502, not retried, billed), never a parsed success', async () => {
      const sdk = new OpenAI({ apiKey: gw.key.plaintext, baseURL: `${gw.url}/v1` }); // default maxRetries (2)
      await expect(sdk.chat.completions.parse({ model: 'fake', messages: [{ role: 'user', content: reply('Sure! Here is a person: Ann') }], response_format: zodResponseFormat(Person, 'person') })).rejects.toMatchObject({
        status: 502,
        code: 'output_invalid',
        message: expect.stringMatching(/is not a complete JSON document/),
      });
      // x-should-retry: false — the SDK did not pay for two more generations.
      expect(upstream.requests).toHaveLength(1);
      const [record] = await settledRecords(1);
      expect(record).toMatchObject({ status: 'failed', errorCode: 'output_invalid' });
      expect(record.outputTokens).toBeGreaterThan(0);
    });

    it('streamed, an answer that does not match ends the stream with an output_invalid error the SDK raises', async () => {
      const stream = client.chat.completions.stream({ model: 'fake', messages: [{ role: 'user', content: reply('{"name":"Ann","age":"old","tags":[]}') }], response_format: zodResponseFormat(Person, 'person') });
      await expect(stream.finalChatCompletion()).rejects.toThrow(/output_invalid|not valid against the schema/);
    });

    it('zodTextFormat + responses.parse, and responses.stream: output_parsed', async () => {
      const format = zodTextFormat(Person, 'person');
      const response = await client.responses.parse({ model: 'fake', input: reply(JSON.stringify(ANN)), text: { format } });
      expect(response.output_parsed).toEqual(ANN);
      expect(sentFormats()[0]?.json_schema?.schema).toEqual(format.schema);

      const stream = client.responses.stream({ model: 'fake', input: reply(JSON.stringify({ ...ANN, age: 41 })), text: { format } });
      const final = await stream.finalResponse();
      expect(final.output_parsed).toEqual({ ...ANN, age: 41 });
    });

    it('responses.parse: a mismatch is output_invalid', async () => {
      await expect(client.responses.parse({ model: 'fake', input: reply('{"name":"Ann"}'), text: { format: zodTextFormat(Person, 'person') } })).rejects.toMatchObject({
        status: 502,
        code: 'output_invalid',
        message: expect.stringMatching(/must have required property 'age'/),
      });
    });
  });

  describe('AI SDK (ai 6, @ai-sdk/openai 3)', () => {
    const provider = () => createOpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key.plaintext });

    it('generateObject on the chat wire', async () => {
      const { object } = await generateObject({ model: provider().chat('fake'), schema: Person, prompt: reply(JSON.stringify(ANN)), maxRetries: 0 });
      expect(object).toEqual(ANN);
      expect(sentFormats()[0]?.json_schema?.schema).toMatchObject({ $schema: 'http://json-schema.org/draft-07/schema#', required: ['name', 'age', 'tags'] });
    });

    it('generateObject on the Responses wire', async () => {
      const { object } = await generateObject({ model: provider().responses('fake'), schema: Tree, prompt: reply(JSON.stringify(TREE)), maxRetries: 0 });
      expect(object).toEqual(TREE);
    });

    it('streamObject on the chat wire: partial objects, then the final object', async () => {
      const result = streamObject({ model: provider().chat('fake'), schema: Person, prompt: reply(JSON.stringify(ANN)), maxRetries: 0 });
      const partials: unknown[] = [];
      for await (const partial of result.partialObjectStream) partials.push(partial);
      expect(partials.length).toBeGreaterThan(1);
      expect(await result.object).toEqual(ANN);
    });

    it('streamObject on the Responses wire', async () => {
      const result = streamObject({ model: provider().responses('fake'), schema: Person, prompt: reply(JSON.stringify(ANN)), maxRetries: 0 });
      const partials: unknown[] = [];
      // The stream is read for the final object to settle.
      for await (const partial of result.partialObjectStream) partials.push(partial);
      expect(partials.length).toBeGreaterThan(1);
      expect(await result.object).toEqual(ANN);
    });

    it('an answer that does not match: generateObject fails with Weir’s output_invalid; streamObject gets the error event and no object', async () => {
      await expect(generateObject({ model: provider().chat('fake'), schema: Person, prompt: reply('{"nom":"Ann"}'), maxRetries: 0 })).rejects.toMatchObject({
        statusCode: 502,
        responseBody: expect.stringContaining('output_invalid'),
      });
      const errors: unknown[] = [];
      const result = streamObject({ model: provider().chat('fake'), schema: Person, prompt: reply('{"nom":"Ann"}'), maxRetries: 0, onError: ({ error }) => void errors.push(error) });
      const parts: string[] = [];
      for await (const part of result.fullStream) parts.push(part.type);
      // Weir's in-band error (after the deltas it had streamed), then the end: no object.
      expect(parts).toContain('error');
      expect(parts.at(-1)).toBe('finish');
      await expect(result.object).rejects.toMatchObject({ code: 'output_invalid' });
      expect(errors).toEqual([expect.objectContaining({ code: 'output_invalid', message: expect.stringMatching(/must have required property 'name'/) })]);
    });
  });

  describe('LangChain (@langchain/openai 1.2)', () => {
    const model = () => new ChatOpenAI({ model: 'fake', apiKey: gw.key.plaintext, configuration: { baseURL: `${gw.url}/v1` }, maxRetries: 0 });

    it('withStructuredOutput (its default, json_schema on chat): invoke parses the answer; the 2020-12 schema reaches the upstream unchanged', async () => {
      const structured = model().withStructuredOutput(Person);
      expect(await structured.invoke(reply(JSON.stringify(ANN)))).toEqual(ANN);
      const schema = sentFormats()[0]?.json_schema?.schema as Record<string, unknown>;
      expect(schema).toMatchObject({ $schema: 'https://json-schema.org/draft/2020-12/schema', additionalProperties: false });
    });

    it('withStructuredOutput streamed', async () => {
      const structured = model().withStructuredOutput(Person, { method: 'jsonSchema', strict: true });
      const chunks: unknown[] = [];
      for await (const chunk of await structured.stream(reply(JSON.stringify(ANN)))) chunks.push(chunk);
      expect(chunks.at(-1)).toEqual(ANN);
    });

    it('withStructuredOutput: an answer that is not JSON is output_invalid', async () => {
      await expect(model().withStructuredOutput(Person).invoke(reply('no JSON here'))).rejects.toMatchObject({ status: 502, code: 'output_invalid' });
    });
  });
});
