/**
 * Issue 14, part 10, through the running gateway: requests whose prompt, idempotency key, body
 * or path carry a sentinel meet real faults — a database error that quotes the value (PGlite:
 * message, `detail`, `params`), an upstream error whose body echoes the prompt, a body the
 * validator refuses, invalid JSON, an unknown route — and the gateway's whole log (the access
 * log at debug included) never holds the sentinel.
 */
import { PGlite } from '@electric-sql/pglite';
import { Writable } from 'node:stream';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, GenerationInput, IdempotencyStore } from '@weir/core';
import { upstreamStatusError } from '@weir/engines';
import { createLogger } from '@weir/telemetry';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const SENTINEL = 'SENTINEL_gateway_prompt_c41d';

const promptOf = (input: GenerationInput): string => (input.kind === 'text' ? input.text : input.kind === 'chat' ? input.messages.map((m) => m.content).join(' ') : input.items.join(' '));

describe('the gateway logs metadata only (issue 14, part 10)', () => {
  let db: PGlite;
  let gw: TestGateway;
  let logged = '';

  beforeAll(async () => {
    db = new PGlite();
    await db.exec('create table idempotency_keys (tenant_id text, request_id text, primary key (tenant_id, request_id))');
    await db.query('insert into idempotency_keys values ($1, $2)', ['acme', SENTINEL]);
    const engine: EngineAdapter = {
      kind: 'fake',
      capacity: { slots: 4, contextTokens: 4096 },
      async countInputTokens() {
        return 2;
      },
      async *generate(request): AsyncIterable<EngineEvent> {
        const prompt = promptOf(request.input);
        // A driver fault quoting the prompt (message, detail and params), or an upstream that echoes it.
        if (prompt.includes('database')) await db.query('select $1::int', [prompt]);
        throw upstreamStatusError(500, JSON.stringify({ error: { message: `could not handle: ${prompt}`, type: 'server_error' } }), {});
      },
      async close() {},
    };
    // An idempotency store on a real database whose unique violation quotes the key.
    const idempotency = {
      async claim(c: { tenantId: string; requestId: string }) {
        await db.query('insert into idempotency_keys values ($1, $2)', ['acme', c.requestId]);
        return { claimed: true };
      },
      complete: async () => undefined,
      interrupt: async () => undefined,
      abandon: async () => undefined,
      get: async () => undefined,
      findResult: async () => undefined,
      findClaimByGeneration: async () => undefined,
      purgeExpired: async () => 0,
    } as unknown as IdempotencyStore;
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        logged += chunk.toString('utf8');
        done();
      },
    });
    gw = await startTestGateway({
      config: twoTenantConfig(),
      engine,
      idempotency,
      admission: createInMemoryAdmission({ tenants: twoTenantConfig().tenants }),
      logger: createLogger({ name: 'gateway', level: 'debug', destination }),
    });
  }, 30_000);

  afterAll(async () => {
    await gw?.close();
    await db?.close();
  });

  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${gw.key.plaintext}`, 'content-type': 'application/json', ...headers }, body });
  const chat = (content: string) => JSON.stringify({ model: 'fake', messages: [{ role: 'user', content }] });

  it('answers every fault with an error and never writes the sentinel to the log', async () => {
    const answers = [
      await post('/v1/chat/completions', chat(`the database should see ${SENTINEL}`)),
      await post('/v1/chat/completions', chat(`the upstream echoes ${SENTINEL}`)),
      await post('/v1/chat/completions', chat('hello'), { 'idempotency-key': SENTINEL }),
      await post('/v1/chat/completions', JSON.stringify({ model: 'fake', messages: [{ role: 'user', content: 'hi' }], temperature: SENTINEL })),
      await post('/v1/chat/completions', `{"model": "fake", "messages": ${SENTINEL}`),
      await post(`/v1/${SENTINEL}`, chat('hi')),
    ];
    const statuses = await Promise.all(answers.map(async (r) => (await r.arrayBuffer(), r.status)));
    for (const status of statuses) expect(status).toBeGreaterThanOrEqual(400);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const lines = logged.split('\n').filter(Boolean);
    // The access log saw every request, and the database fault was logged by its SQLSTATE and constraint.
    expect(lines.filter((l) => l.includes('"msg":"request"'))).toHaveLength(answers.length);
    expect(logged).toContain('"code":"23505"');
    expect(logged).toContain('"constraint":"idempotency_keys_pkey"');
    expect(logged).not.toContain(SENTINEL);
  }, 30_000);
});
