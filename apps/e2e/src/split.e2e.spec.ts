/**
 * End-to-end on the split topology: router, admission, scheduler, streaming relay, ledger
 * and two gateways as separate processes over gRPC and NATS JetStream (the machine's
 * 127.0.0.1:4222), two llama.cpp engine replicas per revision, the ledger on a private
 * Postgres database. The suite body is the all-in-one's, unchanged; the services authenticate
 * each other with mutual TLS (the launcher's development PKI), and the split's own tests attack
 * their ports without credentials (issue 14 part 8).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { admissionV1, relayV1 } from '@weir/proto';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { grpcMethodPath } from '@weir/transport-grpc';
import { Agent, request } from 'undici';
import { tinyModelPath } from '@weir/testing';
import { describeE2ESuite, sumEngineOutputTokens } from './support/e2e-suite';

jest.setTimeout(180_000);

let split: SplitTopology;

/** One raw unary call (an empty message) to `address`; resolves with its status code. */
function rawUnary(address: string, credentials: grpc.ChannelCredentials, method: string): Promise<grpc.status> {
  const client = new grpc.Client(address, credentials);
  const id = (b: Buffer) => b;
  return new Promise<grpc.status>((resolve) => {
    client.makeUnaryRequest(method, id, id, Buffer.alloc(0), new grpc.Metadata(), { deadline: Date.now() + 5_000 }, (error) => resolve(error ? error.code : grpc.status.OK));
  }).finally(() => client.close());
}

/** One raw server-streaming call; resolves with its final status code. */
function rawStream(address: string, credentials: grpc.ChannelCredentials, method: string): Promise<grpc.status> {
  const client = new grpc.Client(address, credentials);
  const id = (b: Buffer) => b;
  return new Promise<grpc.status>((resolve) => {
    const call = client.makeServerStreamRequest(method, id, id, Buffer.alloc(0), new grpc.Metadata(), { deadline: Date.now() + 5_000 });
    call.on('data', () => undefined);
    call.on('error', () => undefined);
    call.on('status', (s: grpc.StatusObject) => resolve(s.code));
  }).finally(() => client.close());
}

function servicesTrustOnlyServices(): void {
  describe('services trust only services (mutual TLS)', () => {
    const noCertificate = () => grpc.credentials.createSsl(split.tls?.material('operator').ca);
    const operator = () => {
      const m = split.tls?.material('operator');
      return grpc.credentials.createSsl(m?.ca, m?.key, m?.cert);
    };
    const calls: [string, () => string, string, 'unary' | 'stream'][] = [
      ['Reserve at an admission instance', () => split.addresses.admission, grpcMethodPath(admissionV1.AdmissionService.method.reserve), 'unary'],
      ['Settle at an admission instance', () => split.addresses.admissions[1] ?? split.addresses.admission, grpcMethodPath(admissionV1.AdmissionService.method.settle), 'unary'],
      ['Admit at an admission instance', () => split.addresses.admission, grpcMethodPath(admissionV1.AdmissionService.method.admit), 'stream'],
      ['Generate at the relay', () => split.addresses.relay, grpcMethodPath(relayV1.RelayService.method.generate), 'stream'],
      ['Stop at the relay', () => split.addresses.relay, grpcMethodPath(relayV1.RelayService.method.stop), 'unary'],
    ];
    it.each(calls)('a raw gRPC client cannot call %s without a service certificate, nor with one the service does not serve', async (_name, address, method, kind) => {
      const call = kind === 'unary' ? rawUnary : rawStream;
      expect(await call(address(), grpc.credentials.createInsecure(), method)).toBe(grpc.status.UNAVAILABLE);
      expect(await call(address(), noCertificate(), method)).toBe(grpc.status.UNAVAILABLE);
      expect(await call(address(), operator(), method)).toBe(grpc.status.PERMISSION_DENIED);
    });

    it('an engine replica refuses a generation without a client certificate (401) and plain HTTP, and keeps its probes open', async () => {
      const engine = split.engines[0];
      expect(engine.url).toMatch(/^https:\/\//);
      const agent = new Agent({ connect: { ca: split.tls?.material('operator').ca } });
      try {
        const res = await request(`${engine.url}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: engine.revisionId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
        });
        expect(res.statusCode).toBe(401);
        expect(((await res.body.json()) as { error: { code: string } }).error.code).toBe('authentication_failed');
        const ready = await request(`${engine.url}/readyz`, { dispatcher: agent });
        await ready.body.dump();
        expect(ready.statusCode).toBe(200);
      } finally {
        await agent.close();
      }
      await expect(fetch(`${engine.url.replace('https:', 'http:')}/v1/models`)).rejects.toThrow();
      // The operator certificate reads, but does not generate.
      expect((await split.serviceFetch(`${engine.url}/v1/models`)).status).toBe(200);
    });

    it('keeps the development CA and every key in files only the owner can read', () => {
      const dir = split.tls?.dir as string;
      expect(statSync(dir).mode & 0o777).toBe(0o700);
      const files = readdirSync(dir);
      expect(files).toEqual(expect.arrayContaining(['ca.pem', 'gateway-key.pem', 'engine-key.pem', 'relay.pem']));
      for (const f of files) expect(statSync(path.join(dir, f)).mode & 0o777).toBe(0o600);
    });
  });
}

describeE2ESuite('split topology', async ({ configYaml, demoKey, databaseUrl }) => {
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-split-e2e-'));
  const topology = await startSplitTopology({
    configText: configYaml,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl,
    // Its own NATS names: never mixes with another topology on the shared server.
    natsNamespace: `e2e-${randomBytes(4).toString('hex')}`,
    deleteNatsStreamOnStop: true,
    env: { WEIR_DEMO_API_KEY: demoKey },
  });
  split = topology;
  return {
    url: topology.gateways[0].url,
    urls: topology.gateways.map((g) => g.url),
    output: topology.output,
    async engineOutputTokens(revisionId) {
      let total = 0;
      for (const e of topology.engines.filter((x) => x.revisionId === revisionId)) {
        total += sumEngineOutputTokens(await (await topology.serviceFetch(`${e.url}/metrics`)).text(), revisionId);
      }
      return total;
    },
    async stop() {
      const clean = await topology.stop();
      rmSync(workDir, { recursive: true, force: true });
      return clean;
    },
  };
}, servicesTrustOnlyServices);
