import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { Writable } from 'node:stream';
import type { ModelFileLogger } from '@weir/config';
import { createLogger, REDACTED_KEYS } from './index';

function capture() {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, destination };
}

describe('createLogger', () => {
  it.each([
    ['input', { input: 'Once upon a time' }],
    ['messages', { messages: [{ role: 'user', content: 'hi' }] }],
    ['prompt', { prompt: 'Once upon a time' }],
    ['text', { text: 'Lily went to the park' }],
    ['content', { content: 'secret story' }],
    ['nested content', { event: { delta: { content: 'x' } } }],
    ['deep content', { a: { b: { c: { content: 'x' } } } }],
    ['headers.authorization', { headers: { authorization: 'Bearer wk_abc_def' } }],
    ['req.headers.authorization', { req: { headers: { authorization: 'Bearer wk_abc_def' } } }],
    ['x-api-key header', { headers: { 'x-api-key': 'sk-upstream' } }],
    ['apiKey', { apiKey: 'sk-upstream' }],
    ['nested apiKey', { upstream: { apiKey: 'sk-upstream' } }],
    ['plaintext key', { key: { plaintext: 'wk_abcd1234_xxxxxxxxxxxxxxxxxxxxxxxx' } }],
    ['databaseUrl', { env: { databaseUrl: 'postgres://u:pw@db/weir' } }],
    ['a capitalised header', { upstream: { request: { headers: { Authorization: 'Bearer sk-upstream' } } } }],
    ['text inside arrays', { batch: [{ items: [{ prompt: 'Once upon a time' }] }] }],
  ])('redacts %s', (_name, fields) => {
    const { lines, destination } = capture();
    createLogger({ name: 'test', destination }).info(fields, 'event');
    const json = JSON.stringify(lines[0]);
    expect(json).toContain('[redacted]');
    for (const secret of ['Once upon', 'Lily', 'secret story', 'wk_abc', 'sk-upstream', 'pw@db', '"hi"', '"x"']) expect(json).not.toContain(secret);
  });

  it('adds trace_id and span_id of the active span, and nothing outside one', () => {
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    try {
      const { lines, destination } = capture();
      const logger = createLogger({ name: 't', destination });
      const spanContext = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 };
      context.with(trace.setSpanContext(context.active(), spanContext), () => logger.info('inside'));
      logger.info('outside');
      expect(lines[0]).toMatchObject({ msg: 'inside', trace_id: spanContext.traceId, span_id: spanContext.spanId });
      expect(lines[1].trace_id).toBeUndefined();
    } finally {
      context.disable();
    }
  });

  it('keeps metadata, the name and the message', () => {
    const { lines, destination } = capture();
    createLogger({ name: 'gateway', destination }).child({ component: 'relay' }).info({ tenant: 'demo', outputTokens: 12, input: 'x' }, 'generation finished');
    expect(lines[0]).toMatchObject({ name: 'gateway', component: 'relay', tenant: 'demo', outputTokens: 12, input: '[redacted]', msg: 'generation finished', level: 30 });
  });

  it('never modifies the caller\'s objects', () => {
    const { lines, destination } = capture();
    const fields = { tenant: 'demo', request: { messages: ['hi'], headers: { authorization: 'Bearer x' } }, list: [{ text: 't' }] };
    const before = structuredClone(fields);
    createLogger({ name: 't', destination }).info(fields, 'event');
    expect(fields).toEqual(before);
    expect(lines[0]).toMatchObject({ tenant: 'demo', request: { messages: '[redacted]', headers: { authorization: '[redacted]' } }, list: [{ text: '[redacted]' }] });
  });

  it('redacts child bindings', () => {
    const { lines, destination } = capture();
    const bindings = { prompt: 'Once upon a time', ctx: { apiKey: 'sk-upstream' } };
    const child = createLogger({ name: 't', destination }).child(bindings);
    child.info('event');
    child.child({ deeper: { messages: ['hi'] } }).info('grandchild');
    expect(lines[0]).toMatchObject({ prompt: '[redacted]', ctx: { apiKey: '[redacted]' } });
    expect(lines[1]).toMatchObject({ prompt: '[redacted]', ctx: { apiKey: '[redacted]' }, deeper: { messages: '[redacted]' }, msg: 'grandchild' });
    expect(bindings.ctx.apiKey).toBe('sk-upstream');
  });

  it('honours the level', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ name: 't', level: 'warn', destination });
    logger.info('dropped');
    logger.warn('kept');
    expect(lines.map((l) => l.msg)).toEqual(['kept']);
  });

  it('covers the documented keys', () => {
    for (const key of ['input', 'messages', 'prompt', 'text', 'content', 'authorization', 'apiKey']) expect(REDACTED_KEYS).toContain(key);
  });

  it('fits the logger port of @weir/config', () => {
    const logger: ModelFileLogger = createLogger({ name: 't', level: 'silent' });
    expect(typeof logger.info).toBe('function');
  });
});
