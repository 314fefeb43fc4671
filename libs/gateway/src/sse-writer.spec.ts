import { createServer, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { openSse } from './sse-writer';

describe('openSse', () => {
  let server: Server;
  let url: string;
  let handle: (res: ServerResponse) => Promise<void>;
  let writes: string[];
  beforeAll(async () => {
    server = createServer((_req, res) => {
      const write = res.write.bind(res) as (chunk: string) => boolean;
      res.write = ((chunk: string) => {
        writes.push(String(chunk));
        return write(chunk);
      }) as typeof res.write;
      void handle(res);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  beforeEach(() => {
    writes = [];
  });

  it('writes the events of one turn (a chain of promise jobs) in one socket write, in order', async () => {
    handle = async (res) => {
      const sse = openSse(res, { heartbeatMs: 0 });
      for (let i = 0; i < 50; i++) await sse.write(`data: ${i}\n\n`);
      await new Promise((r) => setImmediate(r));
      for (let i = 50; i < 52; i++) await sse.write(`data: ${i}\n\n`);
      sse.end();
    };
    const res = await fetch(url);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const text = await res.text();
    expect(text).toBe(Array.from({ length: 52 }, (_, i) => `data: ${i}\n\n`).join(''));
    // One write for the first turn's 50 events; the last two went out with the end.
    expect(writes).toHaveLength(1);
    expect(writes[0].split('\n\n')).toHaveLength(51);
  });

  it('sends each turn’s events before the next turn, without waiting for end()', async () => {
    let seenBeforeEnd = '';
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    handle = async (res) => {
      const sse = openSse(res, { heartbeatMs: 0 });
      await sse.write('data: first\n\n');
      await gate;
      sse.end();
    };
    const res = await fetch(url);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    seenBeforeEnd = new TextDecoder().decode((await reader.read()).value);
    release();
    while (!(await reader.read()).done);
    expect(seenBeforeEnd).toBe('data: first\n\n');
  });

  it('sends : ping comments while idle', async () => {
    handle = async (res) => {
      const sse = openSse(res, { heartbeatMs: 20 });
      await new Promise((r) => setTimeout(r, 70));
      sse.end();
    };
    const text = await (await fetch(url)).text();
    expect(text.match(/: ping\n\n/g)?.length).toBeGreaterThanOrEqual(2);
  });

  it('makes writers wait for drain when the socket buffer is full, and loses nothing', async () => {
    const big = `data: ${'x'.repeat(256 * 1024)}\n\n`;
    let waited = 0;
    handle = async (res) => {
      const sse = openSse(res, { heartbeatMs: 0 });
      for (let i = 0; i < 40; i++) {
        const p = sse.write(big);
        await new Promise((r) => setImmediate(r));
        const again = sse.write('');
        if (again) {
          waited++;
          await again;
        }
        await p;
      }
      sse.end();
    };
    const res = await fetch(url);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    // A slow reader: the server's buffer fills while it waits.
    await new Promise((r) => setTimeout(r, 200));
    let bytes = 0;
    for (let r = await reader.read(); !r.done; r = await reader.read()) bytes += r.value.length;
    expect(bytes).toBe(40 * Buffer.byteLength(big));
    expect(waited).toBeGreaterThan(0);
  });

  it('ends a stream whose client stopped reading once its buffer stayed full past stallMs', async () => {
    let wrote = 0;
    let waited = false;
    const ended = new Promise<{ destroyed: boolean; afterStallMs: number }>((resolve) => {
      handle = async (res) => {
        const sse = openSse(res, { heartbeatMs: 0, stallMs: 300 });
        const chunk = `data: ${'x'.repeat(64 * 1024)}\n\n`;
        let stalledAt = 0;
        res.on('close', () => resolve({ destroyed: res.destroyed && !res.writableFinished, afterStallMs: performance.now() - stalledAt }));
        // Write until the socket's buffers are full (the client reads nothing), then wait as a reader does.
        while (!sse.closed && wrote < 2_000) {
          const wait = sse.write(chunk);
          wrote++;
          if (wait) {
            waited = true;
            stalledAt = performance.now();
            await wait;
          } else await new Promise((r) => setImmediate(r));
        }
      };
    });
    const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
    client.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    client.pause(); // never reads
    const result = await ended;
    client.destroy();
    expect(waited).toBe(true);
    expect(result.destroyed).toBe(true);
    // Ended by the stall limit (300 ms), not by anything else (generous margin for a loaded machine).
    expect(result.afterStallMs).toBeGreaterThanOrEqual(250);
    expect(result.afterStallMs).toBeLessThan(10_000);
  });
});
