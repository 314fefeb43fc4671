import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '@weir/messaging-nats';
import { startPrivateNats, waitUntil, type PrivateNats } from '@weir/testing';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';
import { createNatsConfigBucket } from './nats-config-bucket';
import { createSnapshotPublisher } from './publisher';
import { createSnapshotSubscriber } from './subscriber';
import { recordingLogger } from './test-support';

// A private nats-server (never the shared one) is killed by pid and restarted on the same port
// and store dir: the subscriber keeps serving v1, goes stale after maxStalenessMs, and is fresh
// again once heartbeats flow after the restart; its watch resumes (v2 applies).
describe('config sync across a NATS outage (private nats-server)', () => {
  let server: PrivateNats;
  let cpConn: NatsConnection;
  let dpConn: NatsConnection;

  beforeAll(async () => {
    server = await startPrivateNats();
    const connect = (name: string) => connectNats({ servers: server.url, name, reconnectTimeWaitMs: 200, reconnectJitterMs: 50, pingIntervalMs: 1_000 });
    cpConn = await connect('weir-test-control-plane');
    dpConn = await connect('weir-test-data-plane');
  });
  afterAll(async () => {
    for (const c of [cpConn, dpConn]) if (c && !c.isClosed()) await c.close();
    await server?.dispose();
  });

  it('serves v1 while NATS is down, goes stale after maxStalenessMs, and recovers after the restart', async () => {
    const pair = generateSigningKeyPair();
    const logger = recordingLogger();
    const cpBucket = createNatsConfigBucket(cpConn, { namespace: 'outage', timeoutMs: 1_000 });
    const dpBucket = createNatsConfigBucket(dpConn, { namespace: 'outage', timeoutMs: 1_000, watchRetryBaseMs: 100, watchRetryMaxMs: 500, logger });
    const publisher = createSnapshotPublisher({ bucket: cpBucket, signingKey: loadSigningKey(pair.privateKeyPem) });
    const maxStalenessMs = 1_500;
    const sub = createSnapshotSubscriber({
      bucket: dpBucket,
      verifyKey: loadVerifyKey(pair.publicKeyPem),
      onSnapshot: () => undefined,
      maxStalenessMs,
      initialWaitMs: 5_000,
      logger,
    });
    await publisher.publishSnapshot({ version: 1, config: { tenants: [] } });
    let version = 1;
    const stopBeats = publisher.startHeartbeats(() => version, 250);
    expect((await sub.start())?.version).toBe(1);
    // Heartbeats keep it fresh well past maxStalenessMs.
    await new Promise((resolve) => setTimeout(resolve, 2 * maxStalenessMs));
    expect(sub.status()).toMatchObject({ version: 1, stale: false });
    expect(sub.ageMs()).toBeLessThan(1_000);

    const pid = server.pid;
    expect(pid).toBeDefined();
    await server.stop();
    const downAt = Date.now();
    expect(sub.current()?.version).toBe(1);
    await waitUntil(() => sub.isStale(), 3 * maxStalenessMs, 'stale while NATS is down');
    const staleAfterMs = Date.now() - downAt;
    // Stale once the last heartbeat is older than the bound: not before, and not much later.
    expect(staleAfterMs).toBeGreaterThanOrEqual(maxStalenessMs - 300);
    expect(staleAfterMs).toBeLessThan(maxStalenessMs + 1_000);
    expect(sub.status()).toMatchObject({ version: 1, stale: true });
    expect(sub.current()?.version).toBe(1);

    await server.restart();
    expect(server.pid).not.toBe(pid);
    const upAt = Date.now();
    await waitUntil(() => !sub.isStale(), 20_000, 'fresh again after the restart');
    const freshAfterMs = Date.now() - upAt;

    version = 2;
    await waitUntil(() => !cpConn.isClosed() && cpConn.getServer() !== undefined, 1_000);
    await retry(() => publisher.publishSnapshot({ version: 2, config: { tenants: [{ id: 'after-restart' }] } }));
    await waitUntil(() => sub.version() === 2, 10_000, 'v2 after the restart');
    expect(sub.isStale()).toBe(false);
    const restarts = logger.lines.filter((l) => l.message === 'nats reconnected; re-creating the config watch');
    expect(restarts.length).toBeGreaterThanOrEqual(1);
    console.log(`config outage: stale ${staleAfterMs} ms after the kill (max ${maxStalenessMs}); fresh ${freshAfterMs} ms after the restart`);

    stopBeats();
    await sub.stop();
    await dpBucket.close();
    await cpBucket.close();
  }, 60_000);
});

async function retry<T>(fn: () => Promise<T>, attempts = 20): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (error) {
      if (i >= attempts) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}
