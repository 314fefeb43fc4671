/**
 * The lean HTTP edge: the JSON body reader over a real `node:http` server, and the router.
 * The gateway's own behaviour on top of it (status codes, OpenAI error bodies) is in
 * `edge-errors.spec.ts`.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { isWeirError } from '@weir/core';
import { createEdgeRouter, readJsonBody } from './edge';

describe('readJsonBody', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    server = createServer((req, res) => {
      readJsonBody(req, 64).then(
        (body) => res.end(JSON.stringify({ body: body === undefined ? '<none>' : body })),
        (err: unknown) => res.end(JSON.stringify({ error: isWeirError(err) ? err.code : String(err) })),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  const send = async (body: string | Uint8Array | undefined, headers: Record<string, string>) => {
    const res = await fetch(url, { method: 'POST', headers, ...(body !== undefined ? { body } : {}) });
    return (await res.json()) as { body?: unknown; error?: string };
  };

  it.each<[string, string | Uint8Array | undefined, Record<string, string>, object]>([
    ['a JSON object', '{"a":1}', { 'content-type': 'application/json' }, { body: { a: 1 } }],
    ['a JSON null (any value parses)', 'null', { 'content-type': 'application/json' }, { body: null }],
    ['an empty JSON body as {}', '', { 'content-type': 'application/json' }, { body: {} }],
    ['a +json media type with a utf-8 charset, any case', '[1]', { 'content-type': 'Application/Vnd.Weir+JSON; Charset="UTF-8"' }, { body: [1] }],
    ['a non-JSON media type as no body', '{"a":1}', { 'content-type': 'text/plain' }, { body: '<none>' }],
    ['no content type as no body', '{"a":1}', {}, { body: '<none>' }],
    ['a non-UTF charset as 415', '{}', { 'content-type': 'application/json; charset=latin1' }, { error: 'unsupported_media_type' }],
    ['utf8 (no hyphen) as UTF-8', '{"a":"\u00e9"}', { 'content-type': 'application/json; charset=utf8' }, { body: { a: '\u00e9' } }],
    ['us-ascii as UTF-8', '{"a":1}', { 'content-type': 'application/json; charset=US-ASCII' }, { body: { a: 1 } }],
    ['invalid JSON as 400 invalid_json', '{"a":', { 'content-type': 'application/json' }, { error: 'invalid_json' }],
    ['a declared length over the limit as 413', 'x'.repeat(65), { 'content-type': 'application/json' }, { error: 'payload_too_large' }],
    ['gzip', gzipSync('{"z":"g"}'), { 'content-type': 'application/json', 'content-encoding': 'gzip' }, { body: { z: 'g' } }],
    ['deflate', deflateSync('{"z":"d"}'), { 'content-type': 'application/json', 'content-encoding': 'deflate' }, { body: { z: 'd' } }],
    ['br', brotliCompressSync('{"z":"b"}'), { 'content-type': 'application/json', 'content-encoding': 'BR' }, { body: { z: 'b' } }],
    ['a body that is not what its Content-Encoding says as 400', '{"a":1}', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, { error: 'invalid_request' }],
    ['an unknown Content-Encoding as 415', '{}', { 'content-type': 'application/json', 'content-encoding': 'zstd-x' }, { error: 'unsupported_media_type' }],
    ['an inflated body over the limit as 413', gzipSync(`"${'x'.repeat(200)}"`), { 'content-type': 'application/json', 'content-encoding': 'gzip' }, { error: 'payload_too_large' }],
  ])('reads %s', async (_name, body, headers, expected) => {
    expect(await send(body, headers)).toEqual(expected);
  });

  it('stops at the limit for a chunked body with no length, and the connection still answers', async () => {
    const stream = new ReadableStream({
      start(controller) {
        for (let i = 0; i < 10; i++) controller.enqueue(new TextEncoder().encode('"xxxxxxxxxxxxxxxxxxxx"'));
        controller.close();
      },
    });
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: stream, duplex: 'half' } as RequestInit);
    expect(await res.json()).toEqual({ error: 'payload_too_large' });
    expect(await send('{"after":true}', { 'content-type': 'application/json' })).toEqual({ body: { after: true } });
  });
});

describe('createEdgeRouter', () => {
  const router = createEdgeRouter([
    { method: 'POST', pattern: '/v1/chat/completions', handler: 'chat' },
    { method: 'GET', pattern: '/v1/generations/:id', handler: 'get' },
    { method: 'POST', pattern: '/v1/generations/:id/cancel', handler: 'cancel' },
    { method: 'GET', pattern: '/v1/models', handler: 'models' },
  ]);

  it.each<[string, string, string | undefined, Record<string, string>]>([
    ['POST', '/v1/chat/completions', 'chat', {}],
    ['POST', '/V1/Chat/Completions/', 'chat', {}],
    ['GET', '/v1/chat/completions', undefined, {}],
    ['HEAD', '/v1/models', 'models', {}],
    ['GET', '/v1/generations/gen_AbC', 'get', { id: 'gen_AbC' }],
    ['GET', '/v1/generations/a%20b%2Fc', 'get', { id: 'a b/c' }],
    ['GET', '/v1/generations/%E0%A4%A', 'get', { id: '%E0%A4%A' }],
    ['GET', '/v1/generations/', undefined, {}],
    ['GET', '/v1/generations/x/y', undefined, {}],
    ['POST', '/v1/generations/x/CANCEL', 'cancel', { id: 'x' }],
    ['GET', '/v2/models', undefined, {}],
  ])('%s %s → %s', (method, path, handler, params) => {
    const m = router.match(method, path);
    expect(m?.route.handler).toBe(handler);
    if (m) expect(m.params).toEqual(params);
  });

  it('lists the methods a path takes, for 405 and Allow', () => {
    expect(router.allowed('/v1/chat/completions')).toEqual(['POST']);
    expect(router.allowed('/v1/generations/abc')).toEqual(['GET']);
    expect(router.allowed('/v1/generations/abc/cancel/')).toEqual(['POST']);
    expect(router.allowed('/nothing')).toEqual([]);
  });
});
