// The example NATS server authorization (deploy/nats/weir-nats-server.conf, docs/security.md §8)
// on a private nats-server: each service logs in with its own NATS_* credentials, and only the
// relay and the gateways may add usage records (the bills), only the ledger may consume them,
// only the control plane may write the configuration bucket; no credentials, no entry.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { isWeirError } from '@weir/core';
import { connectNats, ensureUsageStream, natsAuthFromEnv, NO_NATS_AUTH } from '@weir/messaging-nats';
import { type PrivateNats, startPrivateNats } from '@weir/testing';
import { createNatsConfigBucket } from './nats-config-bucket';

const CONF = path.join(__dirname, '../../../deploy/nats/weir-nats-server.conf');
const SERVICES = ['gateway', 'relay', 'scheduler', 'admission', 'router', 'ledger', 'control-plane'] as const;
type Service = (typeof SERVICES)[number];
const passwordVar = (s: Service) => `WEIR_NATS_${s.toUpperCase().replace('-', '_')}_PASSWORD`;

describe('NATS authorization example (deploy/nats/weir-nats-server.conf)', () => {
  let server: PrivateNats;
  let dir: string;
  const passwordFiles = new Map<Service, string>();
  const open: NatsConnection[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'weir-nats-perms-'));
    const env: Record<string, string> = {};
    for (const s of SERVICES) {
      const password = `pw${randomBytes(16).toString('hex')}`; // a leading letter: the server parses a bare value that starts with digits as a number
      const file = path.join(dir, `${s}.pw`);
      writeFileSync(file, `${password}\n`, { mode: 0o600 });
      passwordFiles.set(s, file);
      env[passwordVar(s)] = password; // the server reads its users' passwords from its environment
    }
    server = await startPrivateNats({ args: ['-c', CONF], env });
  });

  afterAll(async () => {
    await Promise.all(open.map((nc) => nc.close().catch(() => undefined)));
    await server?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Connects as a service the way its main does: NATS_USER + NATS_PASSWORD_FILE through natsAuthFromEnv. */
  const as = async (s: Service): Promise<NatsConnection> => {
    const nc = await connectNats({ servers: server.url, name: `weir-test-${s}`, auth: natsAuthFromEnv({ NATS_USER: s, NATS_PASSWORD_FILE: passwordFiles.get(s) }) });
    open.push(nc);
    return nc;
  };
  const publishUsage = (nc: NatsConnection, tenant: string) => jetstream(nc, { timeout: 2_000 }).publish(`weir.usage.${tenant}`, '{}');
  const usageCount = async (nc: NatsConnection) => (await (await jetstreamManager(nc)).streams.info('WEIR_USAGE')).state.messages;

  it('refuses a connection without credentials', async () => {
    const error = await connectNats({ servers: server.url, name: 'weir-test-anon', auth: NO_NATS_AUTH }).catch((e: unknown) => e);
    expect(isWeirError(error) && error.code === 'upstream_unavailable' && !error.retryable).toBe(true);
  });

  it('only the control plane writes the configuration bucket; every service reads and watches it', async () => {
    const cp = createNatsConfigBucket(await as('control-plane'));
    await cp.put('snapshot', new TextEncoder().encode('v1'));
    for (const s of ['gateway', 'relay', 'scheduler', 'admission', 'router', 'ledger'] as const) {
      const bucket = createNatsConfigBucket(await as(s), { timeoutMs: 2_000 });
      expect(new TextDecoder().decode(await bucket.get('snapshot'))).toBe('v1');
      const seen = new Promise<string>((resolve) => {
        void bucket.watch((key, bytes) => {
          if (key === 'snapshot' && bytes) resolve(new TextDecoder().decode(bytes));
        });
      });
      expect(await seen).toBe('v1');
      await expect(bucket.put('snapshot', new TextEncoder().encode(`forged-by-${s}`))).rejects.toThrow(/permission/i);
      await expect(bucket.delete('snapshot')).rejects.toThrow(/permission/i);
    }
    expect(new TextDecoder().decode(await cp.get('snapshot'))).toBe('v1');
  });

  it('only the relay and the gateways add usage records; only the ledger consumes and acks them', async () => {
    const gateway = await as('gateway');
    await ensureUsageStream(gateway);
    await publishUsage(gateway, 'acme');
    const relay = await as('relay');
    await ensureUsageStream(relay);
    await publishUsage(relay, 'acme');
    for (const s of ['scheduler', 'admission', 'router', 'ledger', 'control-plane'] as const) {
      await expect(publishUsage(await as(s), 'acme')).rejects.toThrow(/permission/i);
    }
    expect(await usageCount(gateway)).toBe(2);

    // The ledger: its durable consumer, pulls and acks (as jetstream-batch-source does).
    const ledger = await as('ledger');
    await ensureUsageStream(ledger);
    const jsm = await jetstreamManager(ledger);
    await jsm.consumers.add('WEIR_USAGE', { durable_name: 'weir-ledger', ack_policy: AckPolicy.Explicit });
    expect((await jsm.consumers.info('WEIR_USAGE', 'weir-ledger')).num_pending).toBe(2);
    const consumer = await jetstream(ledger).consumers.get('WEIR_USAGE', 'weir-ledger');
    const m = await consumer.next({ expires: 2_000 });
    expect(m?.subject).toBe('weir.usage.acme');
    expect(await m?.ackAck({ timeout: 2_000 })).toBe(true);

    // Nobody else pulls from, or acks for, the ledger's consumer, nor deletes or purges the stream.
    for (const s of ['gateway', 'relay', 'scheduler'] as const) {
      const nc = await as(s);
      await expect(jetstream(nc, { timeout: 2_000 }).consumers.get('WEIR_USAGE', 'weir-ledger').then((c) => c.next({ expires: 1_000 }))).rejects.toThrow(/permission/i);
      const jsm2 = await jetstreamManager(nc, { timeout: 2_000 });
      await expect(jsm2.streams.purge('WEIR_USAGE')).rejects.toThrow(/permission/i);
      await expect(jsm2.streams.delete('WEIR_USAGE')).rejects.toThrow(/permission/i);
    }
    expect(await usageCount(gateway)).toBe(2);
  });

  it('only the gateways send cancels; the relay receives them', async () => {
    const relay = await as('relay');
    const got: string[] = [];
    const sub = relay.subscribe('weir.cancel', { callback: (_e, msg) => {
        got.push(msg.string());
      }, });
    await relay.flush();
    const scheduler = await as('scheduler');
    scheduler.publish('weir.cancel', 'forged');
    await scheduler.flush();
    const gateway = await as('gateway');
    gateway.publish('weir.cancel', 'gen-1');
    await gateway.flush();
    const deadline = Date.now() + 5_000;
    while (got.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    // One round trip after the gateway's cancel arrived, a forged one (sent earlier) would have too.
    await relay.flush();
    sub.unsubscribe();
    expect(got).toEqual(['gen-1']);
  });
});
