import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRemoteTokenCounter } from './remote-token-counter';
import { countInputWith, utf8TokenUpperBound } from './token-bound';

function listen(handler: Parameters<typeof createServer>[1]): Promise<{ server: Server; base: string; hits: string[] }> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    handler?.(req, res);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, hits })),
  );
}

describe('createRemoteTokenCounter', () => {
  const servers: Server[] = [];
  afterAll(() => servers.forEach((s) => s.close()));

  it("asks the replica's /tokenize and returns its count", async () => {
    const r = await listen((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        const { input } = JSON.parse(body) as { input: string };
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ input_tokens: input.split(' ').length + 1 }));
      });
    });
    servers.push(r.server);
    const count = createRemoteTokenCounter({ baseUrls: [r.base] });
    await expect(count({ kind: 'text', text: 'one two three' })).resolves.toBe(4);
    expect(r.hits).toEqual(['POST /tokenize']);
  });

  it('tries the next replica, and falls back to the documented upper bound when none answers', async () => {
    const broken = await listen((_req, res) => {
      res.statusCode = 500;
      res.end('{}');
    });
    servers.push(broken.server);
    const count = createRemoteTokenCounter({ baseUrls: [broken.base, 'http://127.0.0.1:1/v1'], timeoutMs: 200 });
    const input = { kind: 'chat' as const, messages: [{ role: 'user' as const, content: 'héllo wörld' }] };
    await expect(count(input)).resolves.toBe(await countInputWith(input, utf8TokenUpperBound));
  });
});
