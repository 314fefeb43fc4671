/**
 * Mutual TLS between the split's services (issue 14 part 8): with `tls` a server refuses every
 * caller that has no certificate of the service CA (the handshake fails) or whose certificate
 * names a service it does not serve (PERMISSION_DENIED), on plain calls and on the mux alike;
 * a client refuses a server that is not the service it asked for. Raw grpc-js clients attack
 * each method; the implementations must never see their calls.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { AdmissionService, SchedulerService } from '@weir/core';
import { admissionV1, relayV1, schedulerV1 } from '@weir/proto';
import { issueDevPki, loadServiceTls, type ServiceTls } from '@weir/service-tls';
import { createScriptedEngine, relayJob } from '@weir/testing';
import { createRelay } from '@weir/streaming';
import { systemClock } from '@weir/core';
import {
  createAdmissionGrpcClient,
  createAdmissionGrpcServer,
  createRelayGrpcClient,
  createRelayGrpcServer,
  createSchedulerGrpcServer,
  grpcMethodPath,
  startGrpcServer,
  type RunningGrpcServer,
} from './index';
import { MUX_SERVICE_DEFINITION } from './mux';
import { stopEverythingAfterEach, track } from './test-support';

stopEverythingAfterEach();

let dir: string;
const tls: Record<string, ServiceTls> = {};
let foreignGateway: ServiceTls;
const seen: string[] = [];
let server: RunningGrpcServer;

const admission: AdmissionService = {
  reserve: async () => (seen.push('reserve'), { ok: true, reservationId: 'rsv_1' }),
  settle: async () => void seen.push('settle'),
  release: async () => void seen.push('release'),
};
const scheduler: SchedulerService = {
  acquire: async () => (seen.push('acquire'), { ok: false, reason: 'queue_full', message: 'full', queueMs: 0, retryAfterMs: 1 }),
};

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'weir-grpc-tls-'));
  const pki = await issueDevPki({ dir: path.join(dir, 'pki'), certificates: ['gateway', 'admission', 'relay', 'engine'].map((name) => ({ name })) });
  for (const name of ['gateway', 'admission', 'relay', 'engine']) tls[name] = loadServiceTls(pki.env(name), { defaultPeers: ['gateway'] }) as ServiceTls;
  const other = await issueDevPki({ dir: path.join(dir, 'other'), certificates: [{ name: 'gateway' }] });
  foreignGateway = loadServiceTls(other.env('gateway')) as ServiceTls;
  // One server standing for the admission, scheduler and relay services, as the admission
  // (its certificate names `admission`), open to the gateway only.
  const relay = createRelay({ engineFor: () => (seen.push('generate'), createScriptedEngine()), settlements: { record: () => undefined } as never, clock: systemClock, cancelGraceMs: 10 });
  server = await startGrpcServer({
    services: [createAdmissionGrpcServer(admission, { scheduler: { acquireAs: async () => (seen.push('admit'), { ok: false, reason: 'queue_full', message: 'full', queueMs: 0, retryAfterMs: 1 }) } }), createSchedulerGrpcServer(scheduler), createRelayGrpcServer(relay)],
    tls: tls.admission,
  });
});
afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => void seen.splice(0));

const credentials = {
  none: () => grpc.credentials.createInsecure(),
  'a certificate of another CA': () => grpc.credentials.createSsl(tls.gateway.ca, foreignGateway.key, foreignGateway.cert),
  'no client certificate': () => grpc.credentials.createSsl(tls.gateway.ca),
  'the relay certificate (not a caller of this service)': () => grpc.credentials.createSsl(tls.gateway.ca, tls.relay.key, tls.relay.cert),
};

const unary = (path: string) => ({ path, kind: 'unary' as const });
const stream = (path: string) => ({ path, kind: 'stream' as const });
const methods = {
  Reserve: unary(grpcMethodPath(admissionV1.AdmissionService.method.reserve)),
  Settle: unary(grpcMethodPath(admissionV1.AdmissionService.method.settle)),
  Release: unary(grpcMethodPath(admissionV1.AdmissionService.method.release)),
  Admit: stream(grpcMethodPath(admissionV1.AdmissionService.method.admit)),
  Acquire: unary(grpcMethodPath(schedulerV1.SchedulerService.method.acquire)),
  Generate: stream(grpcMethodPath(relayV1.RelayService.method.generate)),
  Stop: unary(grpcMethodPath(relayV1.RelayService.method.stop)),
  'the mux stream': { path: MUX_SERVICE_DEFINITION.call.path, kind: 'bidi' as const },
};

/** One raw call (an empty message: valid protobuf for every request type); resolves with its status code. */
function rawCall(creds: grpc.ChannelCredentials, method: { path: string; kind: 'unary' | 'stream' | 'bidi' }): Promise<grpc.status> {
  const client = track(new grpc.Client(server.address, creds));
  const id = (b: Buffer) => b;
  const options = { deadline: Date.now() + 5_000 };
  return new Promise((resolve) => {
    if (method.kind === 'unary') {
      client.makeUnaryRequest(method.path, id, id, Buffer.alloc(0), new grpc.Metadata(), options, (error) => resolve(error ? error.code : grpc.status.OK));
      return;
    }
    const call =
      method.kind === 'stream'
        ? client.makeServerStreamRequest(method.path, id, id, Buffer.alloc(0), new grpc.Metadata(), options)
        : client.makeBidiStreamRequest(method.path, id, id, new grpc.Metadata(), options);
    if (method.kind === 'bidi') (call as grpc.ClientDuplexStream<Buffer, Buffer>).write(Buffer.from([0x0a, 0x00]));
    call.on('data', () => undefined);
    call.on('status', (s: grpc.StatusObject) => resolve(s.code));
    call.on('error', () => undefined);
  });
}

describe('a gRPC server with mutual TLS', () => {
  const cases = Object.entries(credentials).flatMap(([who, creds]) => Object.entries(methods).map(([name, method]) => [who, name, creds, method] as const));
  it.each(cases)('refuses a caller with %s: %s', async (who, _name, creds, method) => {
    const code = await rawCall(creds(), method);
    expect(code).toBe(who.startsWith('the relay') ? grpc.status.PERMISSION_DENIED : grpc.status.UNAVAILABLE);
    expect(seen).toEqual([]);
  });

  it('serves the gateway, over the mux and over plain calls', async () => {
    for (const mux of [true, false]) {
      const client = track(createAdmissionGrpcClient({ address: server.address, tls: tls.gateway, mux }));
      await expect(client.reserve({ caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' }, requestId: 'r', generationId: 'g', expiresAtMs: Date.now() + 60_000, inputTokens: 1, maxOutputTokens: 1, worstCaseCostNanoUsd: 1 })).resolves.toMatchObject({ ok: true, reservationId: 'rsv_1' });
      await client.settle('rsv_1', { usage: { inputTokens: 1, outputTokens: 1 }, costNanoUsd: 1 });
    }
    expect(seen).toEqual(['reserve', 'settle', 'reserve', 'settle']);
    expect(server.muxStreams()).toBeGreaterThanOrEqual(1);
  });

  it('tells a gateway without credentials that it cannot generate, and the relay never starts the job', async () => {
    const client = track(createRelayGrpcClient({ address: server.address, retry: { maxAttempts: 1 } }));
    const outcome = await client.start(relayJob({ tokens: 3 })).done;
    expect(outcome.error?.code).toBe('engine_unavailable');
    expect(outcome.usage.outputTokens).toBe(0);
    expect(seen).toEqual([]);
  });

  it('a client refuses a server whose certificate names another service', async () => {
    // The gateway dials the "relay" address but finds the admission there.
    const client = track(createRelayGrpcClient({ address: server.address, tls: tls.gateway, retry: { maxAttempts: 1 } }));
    const outcome = await client.start(relayJob({ tokens: 3 })).done;
    expect(outcome.error?.code).toBe('engine_unavailable');
    expect(seen).toEqual([]);
  });
});
