import { freePort, startPrivateNats } from '@weir/testing';
import { isWeirError } from '@weir/core';
import { connectNats } from './connect';
import { SHARED_NATS_URL } from './test-support';

describe('connectNats', () => {
  it('connects and logs status without payloads', async () => {
    const lines: [string, object, string | undefined][] = [];
    const log = (level: string) => (f: object, m?: string) => lines.push([level, f, m]);
    const nc = await connectNats({
      servers: SHARED_NATS_URL,
      name: 'weir-test-connect',
      logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') },
    });
    await nc.close();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(lines.map(([level, , m]) => `${level} ${m}`)).toEqual(['info nats connected', 'info nats connection closed']);
  });

  it('fails fast with a retryable WeirError when nothing listens', async () => {
    const port = await freePort();
    const started = Date.now();
    const error = await connectNats({ servers: `127.0.0.1:${port}`, name: 'weir-test-refused' }).catch((e: unknown) => e);
    expect(isWeirError(error) && error.code === 'upstream_unavailable' && error.retryable).toBe(true);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('with waitOnFirstConnect, waits for a server that comes up later (and logs that it waits)', async () => {
    const port = await freePort();
    const warnings: string[] = [];
    const noop = () => undefined;
    const connecting = connectNats({
      servers: `127.0.0.1:${port}`,
      name: 'weir-test-wait',
      waitOnFirstConnect: true,
      reconnectTimeWaitMs: 100,
      reconnectJitterMs: 10,
      logger: { debug: noop, info: noop, warn: (_f: object, m?: string) => warnings.push(m ?? ''), error: noop },
    });
    await new Promise((resolve) => setTimeout(resolve, 400));
    const server = await startPrivateNats({ port });
    try {
      const nc = await connecting;
      await nc.flush();
      await nc.close();
      expect(warnings[0]).toBe('nats not reachable yet; retrying');
    } finally {
      await server.dispose();
    }
  });
});
