import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort } from '@weir/testing';
import { readUpstreamText, startUpstreamCall } from './upstream-call';

describe('startUpstreamCall', () => {
  let server: Server;
  let url: URL;
  let handle: (res: ServerResponse, body: string) => void;
  let closed: Promise<void>;
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => handle(res, body));
      closed = new Promise((resolve) => res.on('close', () => resolve()));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/x?q=1`);
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('sends the request, then hands over every chunk received since the last read, then null', async () => {
    let sent = '';
    handle = (res, body) => {
      sent = body;
      res.writeHead(200, { 'content-type': 'text/plain', 'x-up': 'yes' });
      res.write('one,');
      setTimeout(() => res.end('two'), 20);
    };
    const call = startUpstreamCall({ url, method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
    const head = await call.head;
    expect(head).toMatchObject({ statusCode: 200, headers: { 'x-up': 'yes' } });
    const text: string[] = [];
    for (let batch = await call.read(); batch !== null; batch = await call.read()) text.push(Buffer.concat(batch).toString());
    expect(text.join('')).toBe('one,two');
    expect(call.complete).toBe(true);
    expect(sent).toBe('{"a":1}');
    // Reads after the end keep answering null; an abort then is a no-op.
    call.abort(new Error('late'));
    await expect(call.read()).resolves.toBeNull();
  });

  it('abort rejects a waiting read with the reason and closes the connection', async () => {
    handle = (res) => {
      res.writeHead(200);
      res.write('partial');
    };
    const call = startUpstreamCall({ url, method: 'POST', headers: {}, body: '' });
    await call.head;
    expect(Buffer.concat((await call.read()) ?? []).toString()).toBe('partial');
    const waiting = call.read();
    const reason = new Error('stop now');
    call.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    await closed;
    expect(call.complete).toBe(false);
  });

  it('reads at most maxBytes of a body, then cuts the call', async () => {
    handle = (res) => {
      res.writeHead(500);
      res.write('x'.repeat(100));
    };
    const call = startUpstreamCall({ url, method: 'POST', headers: {}, body: '' });
    expect((await call.head).statusCode).toBe(500);
    expect(await readUpstreamText(call, 10)).toBe('xxxxxxxxxx');
    await closed;
  });

  it('rejects the head with the connection error when nothing listens', async () => {
    const call = startUpstreamCall({ url: new URL(`http://127.0.0.1:${await freePort()}/`), method: 'POST', headers: {}, body: '' });
    await expect(call.head).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await expect(call.read()).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});
