// NATS with authorization on (issue 14 part 8): a private nats-server that only lets in users
// with credentials; connectNats presents the NATS_* ones, a client without them gets nothing.
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { jetstream } from '@nats-io/jetstream';
import { connect, type NatsConnection, nkeys } from '@nats-io/transport-node';
import { isWeirError, type WeirError } from '@weir/core';
import { issueDevPki } from '@weir/service-tls';
import { type PrivateNats, startPrivateNats } from '@weir/testing';
import { connectNats } from './connect';
import { NO_NATS_AUTH, natsAuthFromEnv } from './nats-auth';
import { deleteStream, ensureUsageStream } from './usage-stream';

describe('connectNats against a NATS server that requires credentials', () => {
  let server: PrivateNats;
  let dir: string;
  let passwordFile: string;
  let seedFile: string;
  const password = `pw-${randomBytes(12).toString('hex')}`;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'weir-nats-authz-'));
    const user = nkeys.createUser();
    seedFile = path.join(dir, 'relay.nk');
    writeFileSync(seedFile, `${new TextDecoder().decode(user.getSeed())}\n`, { mode: 0o600 });
    passwordFile = path.join(dir, 'gateway.pw');
    writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
    chmodSync(passwordFile, 0o600);
    const conf = path.join(dir, 'nats.conf');
    writeFileSync(conf, `authorization {\n  users = [\n    { user: gateway, password: "${password}" }\n    { nkey: ${user.getPublicKey()} }\n  ]\n}\n`);
    server = await startPrivateNats({ args: ['-c', conf] });
  });

  afterAll(async () => {
    await server?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  const refusal = async (p: Promise<NatsConnection>): Promise<WeirError> => {
    const error = await p.then(
      async (nc) => {
        await nc.close();
        throw new Error('expected the server to refuse the connection');
      },
      (e: unknown) => e,
    );
    expect(isWeirError(error)).toBe(true);
    return error as WeirError;
  };

  it('refuses a client without credentials, so it cannot publish a cancel or a usage record', async () => {
    const error = await refusal(connectNats({ servers: server.url, name: 'weir-test-anonymous', auth: NO_NATS_AUTH }));
    expect(error.code).toBe('upstream_unavailable');
    expect(error.retryable).toBe(false);
    expect(error.message).toContain('NATS refused a connection without credentials');
    // The plain client too: nothing reaches weir.cancel or the usage subjects without credentials.
    await expect(connect({ servers: server.url, reconnect: false })).rejects.toThrow(/Authorization Violation/i);
  });

  it('connects with the NATS_* credentials and can publish, subscribe and use JetStream', async () => {
    const nc = await connectNats({ servers: server.url, name: 'weir-test-gateway', auth: natsAuthFromEnv({ NATS_USER: 'gateway', NATS_PASSWORD_FILE: passwordFile }) });
    const stream = `WEIR_USAGE_AUTH_${randomBytes(4).toString('hex')}`;
    try {
      const sub = nc.subscribe('weir.cancel', { max: 1 });
      const got = (async () => {
        for await (const m of sub) return m.string();
        return undefined;
      })();
      nc.publish('weir.cancel', 'gen-1');
      expect(await got).toBe('gen-1');

      await ensureUsageStream(nc, { stream, subjects: ['weir-auth.usage.>'], duplicateWindowMs: 60_000, maxAgeMs: 3_600_000 });
      const ack = await jetstream(nc).publish('weir-auth.usage.t1', '{}');
      expect(ack.stream).toBe(stream);
      expect(ack.seq).toBe(1);
    } finally {
      await deleteStream(nc, stream).catch(() => undefined);
      await nc.close();
    }
  });

  it('connects with an nkey seed file', async () => {
    const nc = await connectNats({ servers: server.url, name: 'weir-test-relay', auth: natsAuthFromEnv({ NATS_NKEY_SEED_FILE: seedFile }) });
    expect(nc.isClosed()).toBe(false);
    await nc.flush();
    await nc.close();
  });

  it('reads the NATS_* variables of the process when no auth is passed', async () => {
    const saved = { user: process.env.NATS_USER, file: process.env.NATS_PASSWORD_FILE };
    process.env.NATS_USER = 'gateway';
    process.env.NATS_PASSWORD_FILE = passwordFile;
    try {
      const nc = await connectNats({ servers: server.url, name: 'weir-test-env' });
      await nc.flush();
      await nc.close();
    } finally {
      if (saved.user === undefined) delete process.env.NATS_USER;
      else process.env.NATS_USER = saved.user;
      if (saved.file === undefined) delete process.env.NATS_PASSWORD_FILE;
      else process.env.NATS_PASSWORD_FILE = saved.file;
    }
  });

  it.each([false, true])('a wrong password fails with upstream_unavailable naming the variables, not the secret (waitOnFirstConnect %s)', async (waitOnFirstConnect) => {
    const wrong = `wrong-${randomBytes(8).toString('hex')}`;
    const error = await refusal(
      connectNats({ servers: server.url, name: 'weir-test-wrong', waitOnFirstConnect, reconnectTimeWaitMs: 100, auth: natsAuthFromEnv({ NATS_USER: 'gateway', NATS_PASSWORD: wrong }) }),
    );
    expect(error.code).toBe('upstream_unavailable');
    expect(error.retryable).toBe(false);
    expect(error.message).toBe('NATS refused the credentials from NATS_USER, NATS_PASSWORD (weir-test-wrong): authorization violation');
    expect(error.message).not.toContain(wrong);
    expect(error.message).not.toContain(password);
  });
});

describe('connectNats against a NATS server that requires mutual TLS', () => {
  let server: PrivateNats;
  let dir: string;
  let files: { ca: string; clientCert: string; clientKey: string; otherCa: string; otherCert: string; otherKey: string };

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'weir-nats-tls-'));
    const pki = await issueDevPki({ dir: path.join(dir, 'pki'), certificates: [{ name: 'nats' }, { name: 'gateway' }] });
    const other = await issueDevPki({ dir: path.join(dir, 'other'), certificates: [{ name: 'gateway' }] });
    const serverFiles = pki.files.get('nats');
    const client = pki.files.get('gateway');
    const stranger = other.files.get('gateway');
    if (!serverFiles || !client || !stranger) throw new Error('dev PKI did not issue the certificates');
    files = { ca: pki.caFile, clientCert: client.cert, clientKey: client.key, otherCa: other.caFile, otherCert: stranger.cert, otherKey: stranger.key };
    const conf = path.join(dir, 'nats-tls.conf');
    writeFileSync(conf, `tls {\n  cert_file: "${serverFiles.cert}"\n  key_file: "${serverFiles.key}"\n  ca_file: "${pki.caFile}"\n  verify: true\n  timeout: 2\n}\n`);
    server = await startPrivateNats({ args: ['-c', conf] });
  });

  afterAll(async () => {
    await server?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('connects with NATS_TLS_CA + NATS_TLS_CERT + NATS_TLS_KEY and can publish and subscribe', async () => {
    const nc = await connectNats({
      servers: server.url,
      name: 'weir-test-mtls',
      auth: natsAuthFromEnv({ NATS_TLS_CA: files.ca, NATS_TLS_CERT: files.clientCert, NATS_TLS_KEY: files.clientKey }),
    });
    try {
      const sub = nc.subscribe('weir.health', { max: 1 });
      nc.publish('weir.health', 'ok');
      for await (const m of sub) expect(m.string()).toBe('ok');
    } finally {
      await nc.close();
    }
  });

  it.each([
    ['no TLS settings (the server CA is unknown)', () => ({})],
    ['the CA but no client certificate', () => ({ NATS_TLS_CA: files.ca })],
    ['a client certificate from another CA', () => ({ NATS_TLS_CA: files.ca, NATS_TLS_CERT: files.otherCert, NATS_TLS_KEY: files.otherKey })],
  ])('refuses a client with %s', async (_label, env) => {
    const error = await connectNats({ servers: server.url, name: 'weir-test-mtls-refused', connectTimeoutMs: 3_000, auth: natsAuthFromEnv(env()) }).then(
      async (nc) => {
        await nc.close();
        throw new Error('expected the server to refuse the connection');
      },
      (e: unknown) => e,
    );
    expect(isWeirError(error) && error.code === 'upstream_unavailable').toBe(true);
  });
});
