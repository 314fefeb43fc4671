/**
 * `POST /v1/responses` on the test gateway (real router, admission, scheduler and relay) over a
 * hand-written engine that says what its input's script asks, in both body shapes, streamed and
 * not, with and without an output schema — and the official `openai` SDK calling it.
 */
import { createInMemoryAdmission, type InMemoryAdmission } from '@weir/admission';
import { type AdmissionService, type EngineAdapter, type EngineEvent, type EngineRequest, type RevisionSpec, WeirError } from '@weir/core';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { schemaWorker } from '@weir/streaming';
import OpenAI from 'openai';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** What the reply engine says: `reply` in pieces of 4 characters (1 token each). */
interface ReplyScript {
  reply?: string;
  /** Throw `upstream_error` before any output. */
  failBefore?: boolean;
}

const DEFAULT_REPLY = 'Hello there, friend.';

/** An engine that answers the script in its last message (JSON), else {@link DEFAULT_REPLY}; records requests. */
function replyEngine(): EngineAdapter & { requests: Omit<EngineRequest, 'signal'>[] } {
  const requests: Omit<EngineRequest, 'signal'>[] = [];
  return {
    kind: 'reply',
    capacity: { slots: 4, contextTokens: 64 },
    requests,
    async countInputTokens() {
      return 7;
    },
    async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
      const { signal, ...rest } = request;
      requests.push(structuredClone(rest));
      const last = request.input.kind === 'text' ? request.input.text : request.input.kind === 'chat' ? (request.input.messages.at(-1)?.content ?? '') : '';
      let script: ReplyScript = {};
      try {
        script = JSON.parse(last) as ReplyScript;
      } catch {
        // plain text: the default reply
      }
      if (script.failBefore) throw new WeirError('upstream_error', 'the upstream failed');
      const reply = script.reply ?? DEFAULT_REPLY;
      const pieces = reply.match(/[\s\S]{1,4}/g) ?? [];
      let n = 0;
      for (; n < Math.min(pieces.length, request.maxOutputTokens) && !signal.aborted; n++) yield { type: 'delta', text: pieces[n], tokens: 1 };
      const reason = signal.aborted ? 'aborted' : n < pieces.length ? 'length' : 'stop';
      yield { type: 'end', reason, usage: { inputTokens: 7, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
}

const script = (s: ReplyScript) => JSON.stringify(s);
const PERSON = { type: 'object', properties: { name: { type: 'string', maxLength: 20 } }, required: ['name'], additionalProperties: false };
const jsonCapable: RevisionSpec = { ...fakeRevision(), capabilities: { streaming: true, tools: false, jsonOutput: true } };

/** Parses an SSE body into events (name, id, data). */
async function sseEvents(res: Response): Promise<EventSourceMessage[]> {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => events.push(e) });
  parser.feed(await res.text());
  return events;
}

interface Harness {
  gw: TestGateway;
  engine: ReturnType<typeof replyEngine>;
  admission: InMemoryAdmission;
  reserves: () => number;
}

async function start(revision: RevisionSpec): Promise<Harness> {
  const config = twoTenantConfig(revision);
  const engine = replyEngine();
  const admission = createInMemoryAdmission({ tenants: config.tenants });
  let reserves = 0;
  const counting: AdmissionService = {
    ...admission,
    reserve: (r) => {
      reserves++;
      return admission.reserve(r);
    },
    settle: (id, s) => admission.settle(id, s),
    release: (id) => admission.release(id),
  };
  const gw = await startTestGateway({ config, engine, admission: counting });
  return { gw, engine, admission, reserves: () => reserves };
}

/** Waits until the relay's usage records are in (they are written as the generation ends). */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
}

describe('POST /v1/responses', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await start(jsonCapable);
  });
  afterAll(() => h.gw.close());
  beforeEach(() => {
    h.engine.requests.length = 0;
    h.gw.records.length = 0;
  });

  const weir = (body: Record<string, unknown>, headers?: Record<string, string>) =>
    h.gw.post('/v1/responses', { model: 'fake', use_case: 'support.summaries', max_tokens: 16, messages: [{ role: 'user', content: 'Hi' }], ...body }, headers);

  describe("Weir's shape (the gateway seed)", () => {
    it('answers output_text with model_used, usage, cost and the cache and fallback flags', async () => {
      const res = await weir({});
      expect(res.status).toBe(200);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).toEqual({
        object: 'weir.response',
        id: expect.stringMatching(/^gen_/),
        request_id: expect.any(String),
        output_text: DEFAULT_REPLY,
        finish_reason: 'stop',
        model_used: 'fake@1',
        usage: { input_tokens: 7, output_tokens: 5, cached_input_tokens: 0 },
        cost_usd: (7 + 5) / 1e6,
        cached: false,
        fallback: false,
      });
      expect(res.headers.get('x-weir-model-revision')).toBe('fake@1');
      expect(h.engine.requests[0]).not.toHaveProperty('outputSchema');
      expect(h.engine.requests[0].maxOutputTokens).toBe(16);
      await until(() => h.gw.records.length === 1);
      expect(h.gw.records[0]).toMatchObject({ useCase: 'support.summaries', outputTokens: 5, modelRevision: 'fake@1' });
    });

    it("streams Weir's start/delta/end events, the end carrying model_used, token counts, cost, cached and fallback", async () => {
      const res = await weir({ stream: true });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = await sseEvents(res);
      expect(events.map((e) => [e.id, e.event])).toEqual([['1', 'start'], ['2', 'delta'], ['3', 'delta'], ['4', 'delta'], ['5', 'delta'], ['6', 'delta'], ['7', 'end']]);
      expect(JSON.parse(events[0].data)).toMatchObject({ generation_id: expect.stringMatching(/^gen_/), model_revision: 'fake@1' });
      expect(events.slice(1, -1).map((e) => (JSON.parse(e.data) as { text: string }).text).join('')).toBe(DEFAULT_REPLY);
      expect(JSON.parse(events.at(-1)?.data ?? '')).toEqual({
        finish_reason: 'stop',
        usage: { input_tokens: 7, output_tokens: 5, cached_input_tokens: 0, cost_usd: 12 / 1e6 },
        model_used: 'fake@1',
        cached: false,
        fallback: false,
      });
    });

    it('with output_schema: the engine gets the schema and the answer is the parsed output', async () => {
      const res = await weir({ output_schema: PERSON, messages: [{ role: 'user', content: script({ reply: '{"name": "Ann"}' }) }] });
      expect(res.status).toBe(200);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body.output).toEqual({ name: 'Ann' });
      expect(body).not.toHaveProperty('output_text');
      expect(h.engine.requests[0].outputSchema).toEqual(PERSON);

      const streamed = await sseEvents(await weir({ stream: true, output_schema: PERSON, messages: [{ role: 'user', content: script({ reply: '{"name": "Ann"}' }) }] }));
      expect(JSON.parse(streamed.at(-1)?.data ?? '')).toMatchObject({ finish_reason: 'stop', output: { name: 'Ann' } });
    });

    it('an output that does not match is output_invalid (502, no retry), naming paths but not the text, and its tokens are billed', async () => {
      const res = await weir({ output_schema: PERSON, messages: [{ role: 'user', content: script({ reply: '{"name": 42, "secret": "s3cr3t"}' }) }] });
      expect(res.status).toBe(502);
      expect(res.headers.get('x-should-retry')).toBe('false');
      const { error } = (await res.json()) as { error: { code: string; type: string; message: string } };
      expect(error.code).toBe('output_invalid');
      expect(error.type).toBe('server_error');
      expect(error.message).toContain('`/` must NOT have additional properties');
      expect(error.message).toContain('`/name` must be string');
      expect(error.message).not.toContain('s3cr3t');
      expect(error.message).not.toContain('secret');
      await until(() => h.gw.records.length === 1);
      // The relay's record: every token produced is billed.
      expect(h.gw.records[0]).toMatchObject({ outputTokens: 8, inputTokens: 7, status: 'failed', errorCode: 'output_invalid' });
      expect(h.gw.records[0].costNanoUsd).toBeGreaterThan(0);
    });

    it("an invalid output's verdict is the relay's: the ledger row and an /events replay both say output_invalid", async () => {
      h.gw.records.length = 0;
      const res = await weir({ stream: true, output_schema: PERSON, messages: [{ role: 'user', content: script({ reply: '{"nom": "Ann"}' }) }] });
      const first = await sseEvents(res);
      const generationId = (JSON.parse(first[0].data) as { generation_id: string }).generation_id;
      await until(() => h.gw.records.length === 1);
      expect(h.gw.records[0]).toMatchObject({ generationId, status: 'failed', errorCode: 'output_invalid' });
      // Weir's own event stream of the same generation never passes the invalid output on as a success.
      const replay = await sseEvents(await h.gw.get(`/v1/generations/${generationId}/events`));
      expect(replay.at(-1)?.event).toBe('end');
      expect(JSON.parse(replay.at(-1)?.data ?? '')).toMatchObject({ finish_reason: 'error', error: { code: 'output_invalid' } });
    });

    it('an output that is not JSON ends the stream with an explicit output_invalid error, usage included', async () => {
      const events = await sseEvents(await weir({ stream: true, output_schema: PERSON, messages: [{ role: 'user', content: script({ reply: 'Once upon a time' }) }] }));
      const end = JSON.parse(events.at(-1)?.data ?? '') as Record<string, unknown>;
      expect(events.at(-1)?.event).toBe('end');
      expect(end).toMatchObject({ finish_reason: 'error', usage: { output_tokens: 4 }, model_used: 'fake@1', error: { code: 'output_invalid', type: 'server_error' } });
      expect((end.error as { message: string }).message).toMatch(/not a complete JSON document/);
      expect((end.error as { message: string }).message).not.toContain('Once');
      expect(end).not.toHaveProperty('output');
    });

    it('an output cut at the limit is output_invalid saying so', async () => {
      const res = await weir({ max_tokens: 2, output_schema: PERSON, messages: [{ role: 'user', content: script({ reply: '{"name": "Ann"}' }) }] });
      expect(res.status).toBe(502);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe('output_invalid');
      expect(error.message).toMatch(/reached its limit \(2 tokens\)/);
    });

    it.each<[string, Record<string, unknown>, string, RegExp]>([
      ['no model, with a use case the tenant does not define', { model: undefined }, 'use_case', /is not defined in your tenant's policy \(it defines none\).*send `model`/],
      ['no use_case', { use_case: undefined }, 'use_case', /use_case/],
      ['no max_tokens', { max_tokens: undefined }, 'max_tokens', /max_tokens/],
      ['no messages', { messages: undefined }, 'messages', /messages/],
      ['an unknown field', { tools: [] }, 'tools', /unknown field\(s\) `tools`/],
      ['an invalid schema', { output_schema: { type: 'objec' } }, 'output_schema', /output_schema\/type must be equal to one of the allowed values/],
      ['an unknown keyword in the schema', { output_schema: { type: 'object', requried: ['a'] } }, 'output_schema', /unknown keyword: "requried"/],
      ['a schema that is not an object', { output_schema: 'json' }, 'output_schema', /must be a JSON Schema object/],
      ['an unsupported dialect (draft-04)', { output_schema: { $schema: 'http://json-schema.org/draft-04/schema#', type: 'object' } }, 'output_schema', /names no supported draft; use one of "http:\/\/json-schema.org\/draft-07\/schema#"/],
      ['an unresolvable $ref', { output_schema: { $ref: 'https://example.com/s.json' } }, 'output_schema', /can't resolve reference/],
    ])('refuses %s with a 400 naming the field, before any reservation or engine work', async (_name, patch, param, message) => {
      const before = h.reserves();
      const res = await weir(patch);
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { code: string; param: string | null; message: string } };
      expect(error.code).toBe('invalid_request');
      expect(error.param).toBe(param === '' ? null : param);
      expect(error.message).toMatch(message);
      expect(h.reserves()).toBe(before);
      expect(h.engine.requests).toEqual([]);
      expect(h.admission.held()).toEqual([]);
    });

    it('replays a repeat with the same Idempotency-Key instead of generating again', async () => {
      const first = await weir({}, { 'Idempotency-Key': 'resp-key-1' });
      const again = await weir({}, { 'Idempotency-Key': 'resp-key-1' });
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(((await again.json()) as { id: string }).id).toBe(((await first.json()) as { id: string }).id);
      expect(h.engine.requests).toHaveLength(1);
    });

    it('answers 405 for GET', async () => {
      const res = await h.gw.get('/v1/responses');
      expect(res.status).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
    });
  });

  describe("OpenAI's Responses API shape", () => {
    const openai = (body: Record<string, unknown>) => h.gw.post('/v1/responses', { model: 'fake', input: 'Hi', ...body });

    it('answers a response object as the SDKs expect it', async () => {
      const res = await openai({ instructions: 'Be brief.', max_output_tokens: 16, temperature: 0 });
      expect(res.status).toBe(200);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).toMatchObject({
        id: expect.stringMatching(/^resp_/),
        object: 'response',
        created_at: expect.any(Number),
        status: 'completed',
        model: 'fake',
        error: null,
        incomplete_details: null,
        instructions: 'Be brief.',
        max_output_tokens: 16,
        temperature: 0,
        output: [{ type: 'message', id: expect.stringMatching(/^msg_/), status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: DEFAULT_REPLY, annotations: [] }] }],
        usage: { input_tokens: 7, output_tokens: 5, total_tokens: 12, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
        weir: { finish_reason: 'stop', model_revision: 'fake@1' },
      });
      // instructions come first, as a system message.
      expect(h.engine.requests[0].input).toEqual({ kind: 'chat', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] });
      expect(h.engine.requests[0].sampling).toEqual({ temperature: 0 });
    });

    it('takes input items with input_text parts', async () => {
      const res = await openai({ input: [{ role: 'developer', content: 'Rules.' }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'A' }, { type: 'input_text', text: 'B' }] }] });
      expect(res.status).toBe(200);
      expect(h.engine.requests[0].input).toEqual({ kind: 'chat', messages: [{ role: 'developer', content: 'Rules.' }, { role: 'user', content: 'AB' }] });
    });

    it('says incomplete (max_output_tokens) when the output limit cut the answer', async () => {
      const body = (await (await openai({ max_output_tokens: 2 })).json()) as Record<string, unknown>;
      expect(body).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, output: [{ status: 'incomplete', content: [{ text: 'Hello th' }] }] });
    });

    it.each<[string, Record<string, unknown>, string, RegExp]>([
      ['tools on a revision without capabilities.tools', { tools: [{ type: 'function', name: 'f' }] }, 'tools', /cannot call tools: revision fake@1/],
      ['previous_response_id', { previous_response_id: 'resp_1' }, 'previous_response_id', /does not store responses/],
      ['reasoning', { reasoning: { effort: 'low' } }, 'reasoning', /`reasoning` is not supported/],
      ['include of anything but encrypted reasoning', { include: ['message.output_text.logprobs'] }, 'include[0]', /no extra output data can be included/],
      ['an unknown field', { frobnicate: 1 }, 'frobnicate', /unknown field `frobnicate`/],
      ["Weir's messages beside input", { messages: [] }, 'messages', /Weir’s shape/],
      ['an image part', { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0].type', /only `input_text` parts/],
      ['a function call output answering no call', { input: [{ type: 'function_call_output', call_id: 'c', output: 'x' }] }, 'input[0].call_id', /no earlier `function_call` item has the call_id 'c'/],
      ['store: true', { store: true }, 'store', /does not store responses/],
      ['json_object format', { text: { format: { type: 'json_object' } } }, 'text.format.type', /json_object is not supported/],
      ['a json_schema format without a schema', { text: { format: { type: 'json_schema', name: 'p' } } }, 'text.format.schema', /required/],
      ['an invalid json_schema', { text: { format: { type: 'json_schema', name: 'p', schema: { type: 'objec' } } } }, 'text.format.schema', /text\.format\.schema\/type must be equal/],
      ['no model', { model: undefined }, 'model', /model/],
    ])('refuses %s with a 400 naming the field, before any reservation', async (_name, patch, param, message) => {
      const before = h.reserves();
      const res = await openai(patch);
      expect(res.status).toBe(400);
      const { error } = (await res.json()) as { error: { param: string | null; message: string } };
      expect(error.param).toBe(param);
      expect(error.message).toMatch(message);
      expect(h.reserves()).toBe(before);
      expect(h.engine.requests).toEqual([]);
    });
  });

  describe('the official openai SDK', () => {
    let client: OpenAI;
    beforeAll(() => {
      client = new OpenAI({ baseURL: `${h.gw.url}/v1`, apiKey: h.gw.key.plaintext, maxRetries: 2 });
    });

    it('client.responses.create returns the answer with output_text and usage', async () => {
      const response = await client.responses.create({ model: 'fake', input: 'Hi', instructions: 'Be kind.', max_output_tokens: 16 });
      expect(response.id).toMatch(/^resp_/);
      expect(response.status).toBe('completed');
      expect(response.output_text).toBe(DEFAULT_REPLY);
      expect(response.usage).toMatchObject({ input_tokens: 7, output_tokens: 5, total_tokens: 12 });
    });

    it('client.responses.create({stream: true}) yields the Responses events in order', async () => {
      const stream = await client.responses.create({ model: 'fake', input: 'Hi', stream: true });
      const types: string[] = [];
      const sequence: number[] = [];
      let text = '';
      let completed: OpenAI.Responses.Response | undefined;
      for await (const event of stream) {
        types.push(event.type);
        sequence.push(event.sequence_number);
        if (event.type === 'response.output_text.delta') text += event.delta;
        if (event.type === 'response.completed') completed = event.response;
      }
      expect(types).toEqual([
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        ...Array(5).fill('response.output_text.delta'),
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ]);
      expect(sequence).toEqual(sequence.map((_, i) => i));
      expect(text).toBe(DEFAULT_REPLY);
      expect(completed?.status).toBe('completed');
      expect(completed?.usage?.output_tokens).toBe(5);
      expect(completed?.output[0]).toMatchObject({ type: 'message', content: [{ type: 'output_text', text: DEFAULT_REPLY }] });
    });

    it('client.responses.stream (the helper) gives the final response', async () => {
      const stream = client.responses.stream({ model: 'fake', input: 'Hi' });
      const final = await stream.finalResponse();
      expect(final.output_text).toBe(DEFAULT_REPLY);
    });

    it('text.format json_schema constrains and validates: a match answers, a mismatch throws output_invalid without retrying', async () => {
      const ok = await client.responses.create({
        model: 'fake',
        input: script({ reply: '{"name":"Ann"}' }),
        text: { format: { type: 'json_schema', name: 'person', schema: PERSON, strict: true } },
      });
      expect(JSON.parse(ok.output_text)).toEqual({ name: 'Ann' });
      expect(h.engine.requests[0].outputSchema).toEqual(PERSON);

      h.engine.requests.length = 0;
      const bad = client.responses.create({ model: 'fake', input: script({ reply: '{"nom":"Ann"}' }), text: { format: { type: 'json_schema', name: 'person', schema: PERSON } } });
      await expect(bad).rejects.toMatchObject({ status: 502, code: 'output_invalid', type: 'server_error' });
      // x-should-retry: false — the SDK (maxRetries 2) did not pay for two more generations.
      expect(h.engine.requests).toHaveLength(1);
    });

    it('a streamed output that fails its schema ends with error then response.failed', async () => {
      const stream = await client.responses.create({ model: 'fake', input: script({ reply: 'not json' }), stream: true, text: { format: { type: 'json_schema', name: 'person', schema: PERSON } } });
      const events: OpenAI.Responses.ResponseStreamEvent[] = [];
      for await (const event of stream) events.push(event);
      expect(events.slice(-2).map((e) => e.type)).toEqual(['error', 'response.failed']);
      expect(events.at(-2)).toMatchObject({ type: 'error', code: 'output_invalid' });
      const failed = events.at(-1) as OpenAI.Responses.ResponseFailedEvent;
      expect(failed.response.status).toBe('failed');
      expect(failed.response.error).toMatchObject({ code: 'output_invalid' });
      expect(failed.response.usage?.output_tokens).toBe(2);
    });

    it('a failure before any output is an HTTP error the SDK raises', async () => {
      await expect(client.responses.create({ model: 'fake', input: script({ failBefore: true }), stream: true })).rejects.toMatchObject({ status: 502, code: 'upstream_error' });
    });
  });
});

describe('POST /v1/responses on a revision that cannot constrain output', () => {
  let h: Harness;
  beforeAll(async () => {
    // openai-compatible without a declared json_output capability.
    h = await start(fakeRevision());
  });
  afterAll(() => h.gw.close());

  it.each([
    ["Weir's shape", { model: 'fake', use_case: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }], output_schema: PERSON }, 'output_schema'],
    ["OpenAI's shape", { model: 'fake', input: 'Hi', text: { format: { type: 'json_schema', name: 'p', schema: PERSON } } }, 'text.format'],
  ])('refuses a schema in %s with a 400 before reserving or reaching the engine', async (_name, body, param) => {
    const res = await h.gw.post('/v1/responses', body);
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { param: string; message: string } };
    expect(error.param).toBe(param);
    expect(error.message).toMatch(/revision fake@1 \(engine openai-compatible\) does not offer JSON-schema output/);
    expect(h.reserves()).toBe(0);
    expect(h.engine.requests).toEqual([]);
  });

  it('still answers text', async () => {
    const res = await h.gw.post('/v1/responses', { model: 'fake', input: 'Hi' });
    expect(res.status).toBe(200);
  });
});

describe('POST /v1/responses on a llama.cpp revision: schemas its grammar cannot express', () => {
  let h: Harness;
  beforeAll(async () => {
    const llama = fakeRevision();
    h = await start({ ...llama, engine: { kind: 'llamacpp', modelSha256: '0'.repeat(64), threads: 1, sequences: 1, contextSize: 64, testTokenDelayMs: 0 } as unknown as RevisionSpec['engine'] });
  });
  afterAll(() => h.gw.close());

  it.each([
    ['a bound llama.cpp would fail on (and print the grammar to stderr)', { type: 'object', properties: { secret_field_name: { type: 'string', minLength: 1_000_000 } } }, /`output_schema` cannot be used with revision fake@1 \(llama.cpp\): at `\/properties\/secret_field_name`: `minLength` 1000000 is above 1000/],
    ['a keyword the grammar cannot express', { type: 'object', properties: { a: { not: { type: 'null' } } } }, /at `\/properties\/a`: `not` cannot be expressed/],
  ])('refuses %s with a 400 naming output_schema, before reserving or reaching the engine', async (_name, schema, message) => {
    const res = await h.gw.post('/v1/responses', { model: 'fake', use_case: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }], output_schema: schema });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { param: string; message: string } };
    expect(error.param).toBe('output_schema');
    expect(error.message).toMatch(message);
    expect(h.reserves()).toBe(0);
    expect(h.engine.requests).toEqual([]);
  });

  it('refuses patternProperties (a schema llama.cpp cannot express) on every route without compiling it on the schema worker', async () => {
    const compile = jest.spyOn(schemaWorker(), 'compile');
    try {
      // A fresh salt per schema: nothing is cached, so today's order would compile each one.
      const heavy = (salt: string) => ({ type: 'object', patternProperties: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`^${salt}_${i}[a-z]{1,8}$`, { type: 'string' }])) });
      const attempts = [
        { path: '/v1/responses', body: { model: 'fake', use_case: 'x', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }], output_schema: heavy('w') }, param: 'output_schema' },
        { path: '/v1/responses', body: { model: 'fake', input: 'Hi', text: { format: { type: 'json_schema', name: 'p', schema: heavy('o') } } }, param: 'text.format' },
        { path: '/v1/chat/completions', body: { model: 'fake', messages: [{ role: 'user', content: 'Hi' }], response_format: { type: 'json_schema', json_schema: { name: 'p', schema: heavy('c') } } }, param: 'response_format' },
      ];
      for (const { path, body, param } of attempts) {
        const res = await h.gw.post(path, body);
        expect(res.status).toBe(400);
        const { error } = (await res.json()) as { error: { param: string; message: string } };
        expect(error.param).toBe(param);
        expect(error.message).toMatch(/`patternProperties` cannot be expressed/);
      }
      expect(compile).not.toHaveBeenCalled();
      expect(h.reserves()).toBe(0);
      expect(h.engine.requests).toEqual([]);
    } finally {
      compile.mockRestore();
    }
  });
});

describe('POST /v1/chat/completions with response_format (structured output on chat)', () => {
  let h: Harness;
  let client: OpenAI;
  beforeAll(async () => {
    h = await start(jsonCapable);
    client = new OpenAI({ apiKey: h.gw.key.plaintext, baseURL: `${h.gw.url}/v1`, maxRetries: 0 });
  });
  afterAll(() => h.gw.close());
  beforeEach(() => {
    h.engine.requests.length = 0;
    h.gw.records.length = 0;
  });

  it('json_schema: the engine gets the schema, a matching answer is served as is (official client)', async () => {
    const completion = await client.chat.completions.create({
      model: 'fake',
      messages: [{ role: 'user', content: script({ reply: '{"name":"Ann"}' }) }],
      max_tokens: 16,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } },
    });
    expect(JSON.parse(completion.choices[0].message.content ?? '')).toEqual({ name: 'Ann' });
    expect(h.engine.requests[0].outputSchema).toEqual(PERSON);
  });

  it("json_schema: a tenant with too many schemas on the worker gets a 429 rate_limited with Retry-After; its compilation waits in its own queue", async () => {
    const compile = jest.spyOn(schemaWorker(), 'compile').mockResolvedValue({ ok: false, busy: true, message: '4 schema jobs of this tenant are already waiting or running' });
    const reservedBefore = h.reserves();
    try {
      const salted = { type: 'object', properties: { [`busy_${Date.now()}`]: { type: 'string' } } };
      const res = await h.gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'Hi' }], response_format: { type: 'json_schema', json_schema: { name: 'p', schema: salted } } });
      expect(res.status).toBe(429);
      expect(res.headers.get('retry-after')).toBe('1');
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe('rate_limited');
      expect(error.message).toMatch(/too many schemas being compiled for this tenant; retry shortly/i);
      // Filed under the caller's tenant (the test gateway's tenant 't'), never a shared queue.
      expect(compile).toHaveBeenCalledWith(JSON.stringify(salted), 'response_format.json_schema.schema', expect.stringMatching(/^t/), undefined);
      expect(h.reserves()).toBe(reservedBefore);
      expect(h.engine.requests).toEqual([]);
    } finally {
      compile.mockRestore();
    }
  });

  it('json_schema: an output that does not match is an explicit output_invalid error, billed, never a 200', async () => {
    const res = await h.gw.post('/v1/chat/completions', {
      model: 'fake',
      messages: [{ role: 'user', content: script({ reply: '{"nom":"Ann"}' }) }],
      max_tokens: 16,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON } },
    });
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('output_invalid');
    await until(() => h.gw.records.length === 1);
    expect(h.gw.records[0]).toMatchObject({ status: 'failed', errorCode: 'output_invalid' });
  });

  it('json_object: any JSON object passes, anything else is output_invalid', async () => {
    const ok = await client.chat.completions.create({ model: 'fake', messages: [{ role: 'user', content: script({ reply: '{"a":1}' }) }], max_tokens: 16, response_format: { type: 'json_object' } });
    expect(ok.choices[0].message.content).toBe('{"a":1}');
    expect(h.engine.requests[0].outputSchema).toEqual({ type: 'object' });
    await expect(
      client.chat.completions.create({ model: 'fake', messages: [{ role: 'user', content: script({ reply: '[1,2]' }) }], max_tokens: 16, response_format: { type: 'json_object' } }),
    ).rejects.toMatchObject({ status: 502, code: 'output_invalid' });
  });

  it.each<[string, Record<string, unknown>, string]>([
    ['an unknown type', { type: 'yaml' }, 'response_format.type'],
    ['a json_schema without a schema', { type: 'json_schema', json_schema: { name: 'p' } }, 'response_format.json_schema.schema'],
    ['an invalid schema', { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'objekt' } } }, 'response_format.json_schema.schema'],
  ])('refuses %s with a 400 naming the field, before reserving', async (_name, format, param) => {
    const reservedBefore = h.reserves();
    const res = await h.gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, response_format: format });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe(param);
    expect(h.reserves()).toBe(reservedBefore);
    expect(h.engine.requests).toEqual([]);
  });
});

describe('POST /v1/chat/completions with response_format on a revision without json_output', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await start(fakeRevision());
  });
  afterAll(() => h.gw.close());

  it('refuses json_schema with a 400 naming response_format, before reserving; text still answers', async () => {
    const res = await h.gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: PERSON } } });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { param: string; message: string } };
    expect(error.param).toBe('response_format');
    expect(error.message).toMatch(/does not offer JSON-schema output/);
    expect(h.reserves()).toBe(0);
    expect((await h.gw.post('/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, response_format: { type: 'text' } })).status).toBe(200);
  });
});
