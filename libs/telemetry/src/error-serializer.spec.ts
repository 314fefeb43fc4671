import { PGlite } from '@electric-sql/pglite';
import Ajv from 'ajv';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { Agent, interceptors, request } from 'undici';
import { z } from 'zod';
import { WeirError } from '@weir/core';
import { createLogger, scrubErrorMessage, serializeError, type WeirLogger } from './index';

/** A value that stands for tenant data (a prompt fragment, a stored result, a tenant's name). */
const SENTINEL = 'SENTINEL_7f3a_prompt_fragment';

function capture(): { text: () => string; lines: Record<string, unknown>[]; logger: WeirLogger } {
  const lines: Record<string, unknown>[] = [];
  let raw = '';
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      raw += chunk.toString('utf8');
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { text: () => raw, lines, logger: createLogger({ name: 'test', level: 'debug', destination }) };
}

/** Every way Weir's code hands an error to a logger (see the `log.error`/`.warn` call sites). */
function logEveryWay(logger: WeirLogger, err: unknown): void {
  logger.error({ err }, 'failed');
  logger.warn({ err });
  logger.error({ error: err }, 'failed');
  logger.error({ cause: err }, 'failed');
  logger.error({ ctx: { nested: { err } } }, 'failed');
  // An Error is recognised anywhere; a plain object only under err / error / cause.
  if (err instanceof Error) logger.error({ list: [err] }, 'failed');
  if (err instanceof Error) logger.error(err);
  logger.error({ err: new WeirError('internal', 'internal error', { cause: err }) }, 'request failed');
  logger.child({ err }).info('child binding');
}

async function caught(run: () => unknown): Promise<unknown> {
  try {
    await run();
  } catch (error) {
    return error;
  }
  throw new Error('expected a failure');
}

describe('scrubErrorMessage', () => {
  it.each([
    ['a quoted value', `invalid input syntax for type integer: "${SENTINEL}"`, 'invalid input syntax for type integer: "…"'],
    ['single quotes at word edges', `Cannot read properties of undefined (reading '${SENTINEL}')`, 'Cannot read properties of undefined (reading "…")'],
    ['an apostrophe is not a quote', `can't reach '${SENTINEL}' now`, `can't reach "…" now`],
    ['an odd number of quotes: cut at the first', `bad "a" ${SENTINEL} "b`, 'bad "…"'],
    ['a V8 JSON error', `Unexpected token 'S', "{"a": ${SENTINEL}" is not valid JSON`, 'invalid JSON'],
    ['only the first line', `first line\n${SENTINEL}`, 'first line'],
    ['curly quotes', `value “${SENTINEL}” refused`, 'value "…" refused'],
  ])('%s', (_name, input, expected) => {
    expect(scrubErrorMessage(input)).toBe(expected);
  });

  it('cuts long messages', () => {
    expect(scrubErrorMessage('x'.repeat(1000)).length).toBeLessThanOrEqual(301);
  });
});

describe('serializeError', () => {
  it('keeps the class, code, naming fields and frames; drops detail, where, hint, query, params, body', () => {
    const err = Object.assign(new Error(`duplicate key value violates unique constraint "t_pkey"`), {
      severity: 'ERROR',
      code: '23505',
      detail: `Key (k)=(${SENTINEL}) already exists.`,
      where: `SQL function "f" statement 1: ${SENTINEL}`,
      hint: SENTINEL,
      query: `insert into t values ('${SENTINEL}')`,
      params: [SENTINEL],
      internalQuery: SENTINEL,
      constraint: 't_pkey',
      table: 't',
      schema: 'public',
      body: SENTINEL,
    });
    const out = serializeError(err);
    expect(out).toMatchObject({ type: 'Error', code: '23505', message: 'unique constraint violated', constraint: 't_pkey', table: 't', schema: 'public', severity: 'ERROR' });
    expect(out.stack).toMatch(/^ {4}at /);
    expect(JSON.stringify(out)).not.toContain(SENTINEL);
  });

  it('never keeps a stack line that is part of the message', () => {
    const err = new Error(`outer\n    at ${SENTINEL} (x.js:1:1)`);
    const out = serializeError(err);
    expect(out.message).toBe('outer');
    expect(JSON.stringify(out)).not.toContain(SENTINEL);
    expect(out.stack).toMatch(/^ {4}at /);
  });

  it('follows the cause chain and AggregateErrors with the same rules', () => {
    const inner = Object.assign(new Error(`connect failed "${SENTINEL}"`), { code: 'ECONNREFUSED', syscall: 'connect', address: SENTINEL });
    const out = serializeError(new AggregateError([inner, new TypeError(`bad '${SENTINEL}'`)], 'all failed', { cause: inner }));
    expect(out).toMatchObject({ type: 'AggregateError', message: 'all failed', cause: { code: 'ECONNREFUSED', syscall: 'connect', message: 'connect failed "…"' } });
    expect(out.errors).toHaveLength(2);
    expect(JSON.stringify(out)).not.toContain(SENTINEL);
  });

  it('describes non-errors by their type only', () => {
    expect(serializeError(SENTINEL)).toEqual({ type: 'string', message: 'non-error thrown' });
    expect(serializeError({ message: `x "${SENTINEL}"`, detail: SENTINEL, code: 'E_X' })).toEqual({ type: 'object', message: 'x "…"', code: 'E_X' });
  });

  it('keeps a Weir error\'s code and flags', () => {
    const out = serializeError(new WeirError('upstream_unavailable', 'upstream answered HTTP 503', { retryable: true, retryAfterMs: 1000, param: 'model' }));
    expect(out).toMatchObject({ type: 'WeirError', code: 'upstream_unavailable', retryable: true, retryAfterMs: 1000, param: 'model', message: 'upstream answered HTTP 503' });
  });
});

describe('logs hold metadata only: real driver and library errors through every log shape', () => {
  let db: PGlite;
  let upstream: Server;
  let upstreamUrl: string;

  beforeAll(async () => {
    db = new PGlite();
    await db.exec('create table idempotency (tenant text, key text, result text, primary key (tenant, key)); create table budget (tenant text primary key, spent int check (spent >= 0))');
    upstream = createServer((_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `upstream echoed: ${SENTINEL}`, type: 'server_error' } }));
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1/chat/completions`;
  }, 30_000);

  afterAll(async () => {
    await db.close();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
  });

  const cases: [string, () => Promise<unknown>, (line: string) => void][] = [
    [
      'PGlite unique violation (detail and params quote the value)',
      async () => {
        await db.query('insert into idempotency values ($1, $2, $3)', ['acme', SENTINEL, 'r']);
        return caught(() => db.query('insert into idempotency values ($1, $2, $3)', ['acme', SENTINEL, 'r']));
      },
      (json) => {
        expect(json).toContain('"code":"23505"');
        expect(json).toContain('"constraint":"idempotency_pkey"');
      },
    ],
    [
      'PGlite check violation (detail quotes the row)',
      () => caught(() => db.query('insert into budget values ($1, $2)', [SENTINEL, -1])),
      (json) => expect(json).toContain('"code":"23514"'),
    ],
    [
      'PGlite invalid input (the message quotes the value)',
      () => caught(() => db.query('select $1::int', [SENTINEL])),
      (json) => expect(json).toContain('"code":"22P02"'),
    ],
    [
      'undici response error (carries the upstream body)',
      () => caught(() => request(upstreamUrl, { dispatcher: new Agent().compose(interceptors.responseError()) })),
      (json) => expect(json).toContain('"statusCode":500'),
    ],
    [
      'ajv validation error (verbose: data in every error)',
      async () => {
        const ajv = new Ajv({ allErrors: true, verbose: true });
        const validate = ajv.compile({ type: 'object', properties: { answer: { type: 'integer' }, note: { type: 'string', maxLength: 3 } } });
        expect(validate({ answer: SENTINEL, note: SENTINEL })).toBe(false);
        return new Ajv.ValidationError(validate.errors ?? []);
      },
      (json) => expect(json).toContain('validation failed: type, maxLength'),
    ],
    [
      'zod error with the input reported',
      () => caught(() => z.object({ model: z.enum(['tiny']), n: z.number() }).parse({ model: SENTINEL, n: SENTINEL }, { reportInput: true })),
      (json) => expect(json).toContain('validation failed: invalid_value, invalid_type'),
    ],
    ['JSON.parse of a body', () => caught(() => JSON.parse(`{"messages": ${SENTINEL}`)), (json) => expect(json).toContain('invalid JSON')],
    ['a thrown plain object', async () => ({ message: `refused "${SENTINEL}"`, detail: SENTINEL }), (json) => expect(json).toContain('"message":"refused \\"…\\""')],
  ];

  it.each(cases)('%s', async (_name, produce, check) => {
    const err = await produce();
    const { text, lines, logger } = capture();
    logEveryWay(logger, err);
    const json = text();
    expect(lines.length).toBeGreaterThanOrEqual(7);
    expect(json).not.toContain(SENTINEL);
    check(json);
  }, 30_000);
});

describe('PII redaction of error messages (issue 15, item 5)', () => {
  it('redacts unquoted PII and secrets left in a message', () => {
    const err = new Error('connect ECONNREFUSED 10.0.0.7:5432 for jane@example.com with sk-proj-Zx9Qp2Lm7Rt4Vb8Nc1Kd6Hs3');
    const out = serializeError(err);
    expect(out.message).toBe('connect ECONNREFUSED [REDACTED:IP]:5432 for [REDACTED:EMAIL] with [REDACTED:SECRET]');
    expect(scrubErrorMessage('card 4111 1111 1111 1111 declined')).toBe('card [REDACTED:CARD] declined');
  });
  it('leaves ordinary messages as they are', () => {
    expect(scrubErrorMessage('socket hang up after 1500 ms (attempt 2 of 3)')).toBe('socket hang up after 1500 ms (attempt 2 of 3)');
  });
});
