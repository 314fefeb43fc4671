/**
 * The end-to-end suite, one body for every composition: the all-in-one and the split
 * topology each provide a {@link Topology} and run these tests unchanged, driven by the
 * official `openai` client and by raw SSE, with the ledger on a private Postgres database.
 */
import OpenAI from 'openai';
import { createTemporaryPostgresDatabase, openDatabase, type TemporaryPostgresDatabase, type WeirDatabase } from '@weir/store-pg';
import { DEMO_KEY, E2E_CONFIG } from './fixtures';
import { readSse, type ReceivedEvent } from './sse';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

/** A running composition of Weir, as the suite sees it. */
export interface Topology {
  /** The gateway's base URL (a split topology may have several gateways; this is the first). */
  url: string;
  /** Every gateway's base URL (the all-in-one has one). Default `[url]`. */
  urls?: string[];
  /** Everything its processes printed (stdout + stderr). */
  output(): string;
  /** Σ over the revision's replicas of the engines' own output-token counters. */
  engineOutputTokens(revisionId: string): Promise<number>;
  /** Graceful stop (SIGTERM); resolves true when every process exited 0. */
  stop(): Promise<boolean>;
}

/** What a composition is started with. */
export interface TopologyOptions {
  configYaml: string;
  demoKey: string;
  /** The ledger's database (a private Postgres database per suite). */
  databaseUrl: string;
}

/** Sums `weir_engine_output_tokens_total` for one revision in a Prometheus text scrape. */
export function sumEngineOutputTokens(metricsText: string, revisionId: string): number {
  let total = 0;
  for (const line of metricsText.split('\n')) {
    if (line.startsWith('weir_engine_output_tokens_total{') && line.includes(`revision="${revisionId}"`)) total += Number(line.split(' ').at(-1));
  }
  return total;
}

/** Defines the whole e2e suite against the topology `start` creates; `more` adds a topology's own tests, run while it is up. */
export function describeE2ESuite(name: string, start: (options: TopologyOptions) => Promise<Topology>, more?: () => void): void {
  describe(name, () => {
    // A topology's own tests (the split's service authentication), run while it is up.
    more?.();
    let weir: Topology;
    let pg: TemporaryPostgresDatabase;
    let ledger: WeirDatabase;
    let client: OpenAI;

    beforeAll(async () => {
      pg = await createTemporaryPostgresDatabase();
      weir = await start({ configYaml: E2E_CONFIG, demoKey: DEMO_KEY, databaseUrl: pg.url });
      ledger = await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 2 });
      client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${weir.url}/v1`, maxRetries: 0 });
    });

    afterAll(async () => {
      try {
        // A graceful stop (SIGTERM: drain, flush usage) exits 0.
        if (weir) expect(await weir.stop()).toBe(true);
      } finally {
        await ledger?.close();
        await pg?.drop();
      }
    });

    const auth = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };

    function post(path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
      return fetch(`${weir.url}${path}`, { method: 'POST', headers: auth, body: typeof body === 'string' ? body : JSON.stringify(body), ...init });
    }

    async function ledgerRow(generationId: string, timeoutMs = 5_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const row = await ledger.db.selectFrom('usage_ledger').selectAll().where('generation_id', '=', generationId).executeTakeFirst();
        if (row) return row;
        if (Date.now() > until) throw new Error(`no ledger row for ${generationId}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }

    async function ledgerCount(): Promise<number> {
      await new Promise((r) => setTimeout(r, 300)); // the usage path flushes in batches every 50 ms
      const r = await ledger.db.selectFrom('usage_ledger').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
      return Number(r.n);
    }

    const engineOutputTokens = (revisionId: string) => weir.engineOutputTokens(revisionId);

    function streamGeneration(body: Record<string, unknown>, options: Parameters<typeof readSse>[1] = {}) {
      return post('/v1/generations', { stream: true, ...body }, { signal: options.abort?.signal }).then(async (res) => {
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
        return readSse(res, options);
      });
    }

    function checkWeirStream(events: ReceivedEvent[]) {
      expect(events.map((e) => Number(e.id))).toEqual(events.map((_, i) => i + 1));
      expect(events[0].event).toBe('start');
      expect(events.filter((e) => e.event === 'end')).toHaveLength(1);
      expect(events.at(-1)?.event).toBe('end');
      for (const e of events.slice(1, -1)) expect(e.event).toBe('delta');
      return {
        start: JSON.parse(events[0].data),
        text: events.filter((e) => e.event === 'delta').map((e) => JSON.parse(e.data).text).join(''),
        end: JSON.parse((events.at(-1) as ReceivedEvent).data),
      };
    }

  describe('the OpenAI-compatible API with the official client', () => {
    it('lists the tenant’s models', async () => {
      const models = await client.models.list();
      expect(models.data.map((m) => m.id).sort()).toEqual(['tiny-stories', 'tiny-stories-slow']);
    });

    it('streams the same text as it returns non-streamed under greedy decoding, with usage', async () => {
      const params = { model: 'tiny-stories', messages: [{ role: 'user' as const, content: 'Once upon a time' }], max_tokens: 40, temperature: 0 };
      const whole = await client.chat.completions.create(params);
      const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let usage: OpenAI.CompletionUsage | null | undefined;
      let finish: string | null = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      expect(whole.choices[0].message.content?.length).toBeGreaterThan(10);
      expect(text).toBe(whole.choices[0].message.content);
      expect(finish).toBe(whole.choices[0].finish_reason);
      expect(usage).toEqual(whole.usage);
      expect(whole.usage?.completion_tokens).toBe(40);
      expect(whole.choices[0].finish_reason).toBe('length');
    });

    it('works with the stream helper (finalChatCompletion) and the legacy completions route', async () => {
      const runner = client.chat.completions.stream({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Lily and Tom' }], max_tokens: 12, temperature: 0 });
      const final = await runner.finalChatCompletion();
      expect(final.choices[0].finish_reason).toBe('length');
      const legacy = await client.completions.create({ model: 'tiny-stories', prompt: 'Once upon a time', temperature: 0 });
      expect(legacy.usage?.completion_tokens).toBe(16); // OpenAI's default max_tokens for /v1/completions
      const legacyStream = await client.completions.create({ model: 'tiny-stories', prompt: 'Once upon a time', temperature: 0, stream: true });
      let text = '';
      for await (const chunk of legacyStream) text += chunk.choices[0]?.text ?? '';
      expect(text).toBe(legacy.choices[0].text);
    });

    it('maps errors to the SDK’s error classes', async () => {
      await expect(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
      const wrong = new OpenAI({ apiKey: 'wk_nope0000_' + 'x'.repeat(43), baseURL: `${weir.url}/v1`, maxRetries: 0 });
      await expect(wrong.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
      await expect(client.chat.completions.create({ model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }], max_tokens: 100_000 })).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    });

    it('never sends id: fields on OpenAI streams, and ends with [DONE]', async () => {
      const res = await post('/v1/chat/completions', { model: 'tiny-stories', messages: [{ role: 'user', content: 'Once' }], max_tokens: 5, stream: true });
      const raw = await res.text();
      expect(raw).not.toMatch(/^id:/m);
      expect(raw).not.toMatch(/^event:/m);
      expect(raw.trimEnd().endsWith('data: [DONE]')).toBe(true);
    });
  });

  describe("Weir's stream on /v1/generations", () => {
    it('has ids 1..n, start, deltas and exactly one end whose usage equals the ledger row and the engine counter', async () => {
      const before = await engineOutputTokens('stories260k@1');
      const { events } = await streamGeneration({ model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 24, temperature: 0, request_id: 'client-key-1' });
      const { start, text, end } = checkWeirStream(events);
      expect(start).toMatchObject({ request_id: 'client-key-1', model_revision: 'stories260k@1' });
      expect(text.length).toBeGreaterThan(0);
      expect(end).toMatchObject({ finish_reason: 'length', model_used: 'stories260k@1', usage: { output_tokens: 24 } });
      const row = await ledgerRow(start.generation_id);
      expect(row).toMatchObject({
        request_id: 'client-key-1',
        tenant_id: 'demo',
        app_id: 'demo-app',
        model_alias: 'tiny-stories',
        model_revision: 'stories260k@1',
        input_tokens: end.usage.input_tokens,
        output_tokens: end.usage.output_tokens,
        status: 'completed',
        finish_reason: 'length',
      });
      expect(Number(row.cost_usd)).toBeCloseTo(end.usage.cost_usd, 12);
      // $0.10/MTok in, $0.20/MTok out
      expect(Number(row.cost_usd)).toBeCloseTo((end.usage.input_tokens * 0.1 + end.usage.output_tokens * 0.2) / 1e6, 12);
      expect((await engineOutputTokens('stories260k@1')) - before).toBe(24);
    });

    it('returns the same text non-streamed, and GET /v1/generations/{id} reports it', async () => {
      const body = { model_alias: 'tiny-stories', input: 'Lily and Tom', max_output_tokens: 20, temperature: 0 };
      const { events } = await streamGeneration(body);
      const streamed = checkWeirStream(events);
      const res = await post('/v1/generations', body);
      expect(res.status).toBe(200);
      const json: Json = await res.json();
      expect(json.text).toBe(streamed.text);
      expect(json.usage).toEqual(streamed.end.usage);
      const status = await (await fetch(`${weir.url}/v1/generations/${json.generation_id}`, { headers: auth })).json();
      expect(status).toMatchObject({ generation_id: json.generation_id, status: 'completed', finish_reason: 'length' });
    });

    it('ends at the deadline with finish_reason deadline, billed for what was produced', async () => {
      const { events } = await streamGeneration({ model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200, deadline_ms: 400 });
      const { start, end } = checkWeirStream(events);
      expect(end.finish_reason).toBe('deadline');
      expect(end.usage.output_tokens).toBeGreaterThan(0);
      expect(end.usage.output_tokens).toBeLessThan(200);
      const row = await ledgerRow(start.generation_id);
      expect(row).toMatchObject({ status: 'deadline', finish_reason: 'deadline', output_tokens: end.usage.output_tokens });
    });

    it('cancels on POST /v1/generations/{id}/cancel, idempotently, and answers the status', async () => {
      let generationId = '';
      const streaming = streamGeneration({ model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200 }, {
        stopAfter: (e) => {
          if (e.event === 'start') generationId = JSON.parse(e.data).generation_id;
          return false;
        },
      });
      while (!generationId) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 300));
      const first = await post(`/v1/generations/${generationId}/cancel`, {});
      expect(first.status).toBe(200);
      expect(await first.json()).toMatchObject({ generation_id: generationId, status: 'cancelled', finish_reason: 'cancelled' });
      const { events } = await streaming;
      const { end } = checkWeirStream(events);
      expect(end.finish_reason).toBe('cancelled');
      const again = await (await post(`/v1/generations/${generationId}/cancel`, {})).json();
      expect(again).toMatchObject({ generation_id: generationId, status: 'cancelled', finish_reason: 'cancelled' });
      expect((await ledgerRow(generationId)).status).toBe('cancelled');
      // Unknown here: 404 on a single gateway; where cancels fan out to the relays (split), the
      // gateway cannot know whether another one holds it, so it answers 202 cancel_requested.
      const missing = await post('/v1/generations/gen_doesnotexist/cancel', {});
      expect([404, 202]).toContain(missing.status);
      if (missing.status === 202) expect(await missing.json()).toEqual({ generation_id: 'gen_doesnotexist', status: 'cancel_requested' });
    });
  });

  describe('deadlines already past', () => {
    it('end a 1 ms deadline with deadline, billing exactly what the engine produced (nothing, or a token or two)', async () => {
      const before = await engineOutputTokens('stories260k@1');
      const { events } = await streamGeneration({ model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 50, deadline_ms: 1 });
      const { start, end } = checkWeirStream(events);
      expect(end.finish_reason).toBe('deadline');
      expect(end.usage.output_tokens).toBeLessThan(5);
      const res = await post('/v1/chat/completions', { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50 }, { headers: { ...auth, 'x-weir-deadline-ms': '1' } });
      const body: Json = await res.json();
      // Cut before any output: 504; cut after the first token: a short answer marked as cut.
      if (res.status === 504) expect(body.error).toMatchObject({ code: 'deadline_exceeded' });
      else expect(body).toMatchObject({ choices: [{ finish_reason: 'length' }], weir: { finish_reason: 'deadline' } });
      const billed = end.usage.output_tokens + (res.status === 504 ? 0 : body.usage.completion_tokens);
      expect((await engineOutputTokens('stories260k@1')) - before).toBe(billed);
      expect(await ledgerRow(start.generation_id)).toMatchObject({ status: 'deadline', output_tokens: end.usage.output_tokens });
    });
  });

  describe('client disconnects', () => {
    it('stops the engine within the grace period and records cancelled with every token produced', async () => {
      const revision = 'stories260k-slow@1';
      const before = await engineOutputTokens(revision);
      const abort = new AbortController();
      let generationId = '';
      await streamGeneration({ model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200 }, {
        abort,
        stopAfter: (e, all) => {
          if (e.event === 'start') generationId = JSON.parse(e.data).generation_id;
          return all.filter((x) => x.event === 'delta').length >= 3;
        },
      });
      // Grace 300 ms + 40 ms/token: production must stop well within 1.5 s of the disconnect.
      await new Promise((r) => setTimeout(r, 1_500));
      const settled = await engineOutputTokens(revision);
      await new Promise((r) => setTimeout(r, 600));
      expect(await engineOutputTokens(revision)).toBe(settled);
      const produced = settled - before;
      expect(produced).toBeGreaterThanOrEqual(3);
      expect(produced).toBeLessThan(200);
      const row = await ledgerRow(generationId);
      expect(row).toMatchObject({ status: 'cancelled', finish_reason: 'cancelled', output_tokens: produced });
    });
  });

  describe('bad input', () => {
    const cases: Array<[string, number, string, () => Promise<Response>]> = [
      ['invalid JSON', 400, 'invalid_json', () => post('/v1/chat/completions', '{"model": "tiny-stories", ')],
      ['a wrong type', 400, 'invalid_request', () => post('/v1/chat/completions', { model: 'tiny-stories', messages: 'hello' })],
      ['a missing field', 400, 'invalid_request', () => post('/v1/generations', { input: 'hi' })],
      ['max_output_tokens of 0', 400, 'invalid_request', () => post('/v1/generations', { model_alias: 'tiny-stories', input: 'hi', max_output_tokens: 0 })],
      ['max_output_tokens below 0', 400, 'invalid_request', () => post('/v1/generations', { model_alias: 'tiny-stories', input: 'hi', max_output_tokens: -5 })],
      ['max_output_tokens above the revision limit', 400, 'output_limit_exceeded', () => post('/v1/generations', { model_alias: 'tiny-stories', input: 'hi', max_output_tokens: 257 })],
      ['input longer than the context window', 400, 'context_length_exceeded', () => post('/v1/generations', { model_alias: 'tiny-stories', input: 'the cat sat on a mat. '.repeat(300) })],
      ['a body over the size limit', 413, 'payload_too_large', () => post('/v1/generations', { model_alias: 'tiny-stories', input: 'x'.repeat(70_000) })],
      ['an unknown alias', 404, 'model_not_found', () => post('/v1/chat/completions', { model: 'gpt-17', messages: [{ role: 'user', content: 'hi' }] })],
      ['a missing key', 401, 'authentication_failed', () => fetch(`${weir.url}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' })],
      ['a wrong key', 401, 'authentication_failed', () => fetch(`${weir.url}/v1/models`, { headers: { Authorization: 'Bearer wk_abcdefgh_' + 'y'.repeat(43) } })],
      ['a malformed key', 401, 'authentication_failed', () => fetch(`${weir.url}/v1/models`, { headers: { Authorization: 'Bearer sk-123' } })],
      ['an unknown field on /v1/generations', 400, 'invalid_request', () => post('/v1/generations', { model_alias: 'tiny-stories', input: 'hi', tenant_id: 'other' })],
      ['n > 1', 400, 'invalid_request', () => post('/v1/chat/completions', { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }], n: 2 })],
      ['a non-JSON content type', 415, 'unsupported_media_type', () => fetch(`${weir.url}/v1/generations`, { method: 'POST', headers: { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'text/plain' }, body: 'hello' })],
      ['a body whose Content-Encoding lies', 400, 'invalid_request', () => fetch(`${weir.url}/v1/generations`, { method: 'POST', headers: { ...auth, 'Content-Encoding': 'gzip' }, body: '{"model_alias":"tiny-stories","input":"hi"}' })],
      ['an unknown Content-Encoding', 415, 'unsupported_media_type', () => fetch(`${weir.url}/v1/generations`, { method: 'POST', headers: { ...auth, 'Content-Encoding': 'zstd-x' }, body: '{}' })],
      ['a JSON null body', 400, 'invalid_request', () => post('/v1/chat/completions', 'null')],
      ['a GET on a POST route', 405, 'method_not_allowed', () => fetch(`${weir.url}/v1/chat/completions`, { headers: auth })],
      ['a non-numeric x-weir-deadline-ms', 400, 'invalid_request', () => post('/v1/chat/completions', { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }] }, { headers: { ...auth, 'x-weir-deadline-ms': '1e3' } })],
    ];

    it.each(cases)('%s gets a clear %i error, charges nothing, and the process stays up', async (_name, status, code, send) => {
      const before = await ledgerCount();
      const res = await send();
      expect(res.status).toBe(status);
      expect(res.headers.get('x-request-id')).toBeTruthy();
      const body: Json = await res.json();
      expect(body.error).toMatchObject({ code });
      expect(typeof body.error.message).toBe('string');
      expect(body.error.message.length).toBeGreaterThan(10);
      expect(await ledgerCount()).toBe(before);
      expect((await fetch(`${weir.url}/healthz`)).status).toBe(200);
    });

    it('names the field at fault in the route’s own terms', async () => {
      const gen: Json = await (await post('/v1/generations', { model_alias: 'tiny-stories', input: 'hi', max_output_tokens: 999 })).json();
      expect(gen.error).toMatchObject({ code: 'output_limit_exceeded', param: 'max_output_tokens' });
      const unknown: Json = await (await post('/v1/generations', { model_alias: 'nope', input: 'hi' })).json();
      expect(unknown.error).toMatchObject({ code: 'model_not_found', param: 'model_alias' });
      const wrongType: Json = await (await post('/v1/chat/completions', { model: 'tiny-stories', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1.5 })).json();
      expect(wrongType.error.message).toContain('expected an integer, got the number 1.5');
    });

    it('names the field at fault', async () => {
      const res = await post('/v1/chat/completions', { model: 'tiny-stories', messages: [{ role: 'user', content: 42 }] });
      const body: Json = await res.json();
      expect(body.error.param).toBe('messages[0].content');
      expect(body.error.message).toContain('messages[0].content');
    });
  });

  describe('load and privacy', () => {
    it('completes 20 concurrent streams correctly, each billed exactly', async () => {
      const prompts = ['Once upon a time', 'Lily and Tom', 'The cat', 'One day'];
      const before = await engineOutputTokens('stories260k@1');
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => streamGeneration({ model_alias: 'tiny-stories', input: prompts[i % prompts.length], max_output_tokens: 30, temperature: 0 })),
      );
      // Sequences decoded together in one batch may round differently from a lone one, so
      // greedy text under load is not compared token for token; the bill must still be exact.
      let billed = 0;
      for (const { events } of results) {
        const { text, end } = checkWeirStream(events);
        expect(end.finish_reason).toBe('length');
        expect(end.usage.output_tokens).toBe(30);
        expect(text.length).toBeGreaterThan(0);
        billed += end.usage.output_tokens;
      }
      expect((await engineOutputTokens('stories260k@1')) - before).toBe(billed);
    });

    it('answers a repeated request_id with the original result on any gateway: one generation, one ledger row, no second charge', async () => {
      const requestId = `idem-${Date.now().toString(36)}`;
      const body = { model_alias: 'tiny-stories', input: 'The little cat', max_output_tokens: 16, temperature: 0, request_id: requestId };
      const before = await engineOutputTokens('stories260k@1');
      const { events } = await streamGeneration(body);
      const original = checkWeirStream(events);
      const other = (weir.urls ?? [weir.url]).at(-1) as string;
      const again = await fetch(`${other}/v1/generations`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      const json: Json = await again.json();
      expect(json).toMatchObject({ generation_id: original.start.generation_id, request_id: requestId, text: original.text, usage: original.end.usage });
      // The retained stream, resumed after event 2, from the other gateway.
      const resumed = await fetch(`${other}/v1/generations/${original.start.generation_id}/events`, { headers: { ...auth, 'Last-Event-ID': '2' } });
      expect(resumed.status).toBe(200);
      const tail = (await readSse(resumed)).events;
      expect(tail.map((e) => [e.id, e.event, e.data])).toEqual(events.slice(2).map((e) => [e.id, e.event, e.data]));
      // The same key with another body is a conflict, and runs nothing.
      const conflict = await post('/v1/generations', { ...body, input: 'A different story' });
      expect(conflict.status).toBe(409);
      expect(await conflict.json()).toMatchObject({ error: { code: 'conflict', param: 'request_id' } });
      await ledgerRow(original.start.generation_id);
      await new Promise((r) => setTimeout(r, 300));
      const rows = await ledger.db.selectFrom('usage_ledger').select(['generation_id']).where('request_id', '=', requestId).execute();
      expect(rows).toEqual([{ generation_id: original.start.generation_id }]);
      expect((await engineOutputTokens('stories260k@1')) - before).toBe(16);
    });

    it('keeps prompt and output text out of the ledger and the logs', async () => {
      const marker = 'Zebracorn Quillfeather';
      const res = await post('/v1/generations', { model_alias: 'tiny-stories', input: `${marker} went to the park`, max_output_tokens: 12, temperature: 0 });
      const json: Json = await res.json();
      const row = await ledgerRow(json.generation_id);
      expect(JSON.stringify(row)).not.toContain('Zebracorn');
      expect(JSON.stringify(row)).not.toContain(json.text.trim());
      expect(weir.output()).not.toContain('Zebracorn');
      const logLines = weir
        .output()
        .split('\n')
        .map((l) => l.replace(/^\[[^\]]+\] /, '')) // a split topology prefixes each process's lines
        .filter((l) => l.startsWith('{'));
      expect(logLines.length).toBeGreaterThan(0);
      expect(logLines.join('\n')).not.toContain(DEMO_KEY.slice(12));
    });
  });
  });
}
