/**
 * An engine replica with mutual TLS (issue 14 part 8), served as `main.ts` serves it
 * (`listenEngineServer` with the `WEIR_TLS_*` material, `defaultEnginePeerPolicies`): nobody
 * without a certificate of the service CA can generate, stop, count or read anything; only the
 * relay generates; the relay's adapter over the mutual-TLS agent works end to end.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createReplicaEngine, createSimulatedEngine, replicaTokenCounter, type SimulatedEngine, silentLogger } from '@weir/engines';
import { defaultEnginePeerPolicies, listenEngineServer } from '@weir/engine-server';
import { createServiceTlsAgent, issueDevPki, loadServiceTls, type ServiceTls } from '@weir/service-tls';
import { collectEngineEvents, engineRequest } from '@weir/testing';
import type { RevisionSpec } from '@weir/core';
import { Agent, request } from 'undici';
import { createSimServer } from './sim-server';

let dir: string;
const tls: Record<string, ServiceTls> = {};
let foreign: ServiceTls;
let engine: SimulatedEngine;
let server: Server;
let origin: string;
const agents: Agent[] = [];

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'weir-engine-tls-'));
  const pki = await issueDevPki({ dir, certificates: ['engine', 'relay', 'gateway', 'reconcile'].map((name) => ({ name })) });
  for (const name of ['engine', 'relay', 'gateway', 'reconcile']) tls[name] = loadServiceTls(pki.env(name), { defaultPeers: ['relay'] }) as ServiceTls;
  foreign = loadServiceTls((await issueDevPki({ dir: path.join(dir, 'other'), certificates: [{ name: 'relay' }] })).env('relay')) as ServiceTls;
  engine = createSimulatedEngine({ kind: 'simulated', prefillTokensPerSecond: 1_000_000, decodeStepMs: [[1, 1]], kvTokens: 4096, maxSequences: 4, seed: 1 });
  const app = createSimServer(engine, { modelName: 'sim@1', logger: silentLogger, peers: defaultEnginePeerPolicies(tls.engine.allowedPeers) });
  server = await new Promise<Server>((resolve) => {
    const s = listenEngineServer(app, { port: 0, host: '127.0.0.1', tls: tls.engine }, () => resolve(s));
  });
  origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  for (const a of agents) await a.close();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

const as = (who: 'none' | 'foreign' | 'relay' | 'gateway' | 'reconcile'): Agent => {
  const agent =
    who === 'none'
      ? new Agent({ connect: { ca: tls.engine.ca } })
      : who === 'foreign'
        ? new Agent({ connect: { ca: tls.engine.ca, cert: foreign.cert, key: foreign.key } })
        : createServiceTlsAgent(tls[who], { expectedServer: 'engine' });
  agents.push(agent);
  return agent;
};

async function call(who: Parameters<typeof as>[0], method: 'GET' | 'POST', route: string, body?: object): Promise<{ status: number; code?: string }> {
  const res = await request(`${origin}${route}`, {
    method,
    dispatcher: as(who),
    ...(body ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
  });
  const text = await res.body.text();
  let code: string | undefined;
  try {
    code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
  } catch {
    code = undefined;
  }
  return { status: res.statusCode, code };
}

const chat = { model: 'sim@1', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
const routes: [string, 'GET' | 'POST', string, object?][] = [
  ['a chat completion', 'POST', '/v1/chat/completions', chat],
  ['a completion', 'POST', '/v1/completions', { model: 'sim@1', prompt: 'hi', max_tokens: 4 }],
  ['a stop', 'POST', '/v1/stop/gen_1'],
  ['a token count', 'POST', '/tokenize', { input: 'hi' }],
  ['a generation usage', 'GET', '/v1/generations/gen_1/usage'],
  ['the model list', 'GET', '/v1/models'],
  ['the metrics', 'GET', '/metrics'],
  ['the stats', 'GET', '/stats'],
];

describe('an engine replica with mutual TLS', () => {
  it.each(routes.flatMap(([name, method, route, body]) => (['none', 'foreign'] as const).map((who) => [name, who, method, route, body] as const)))(
    'refuses %s from a caller with %s certificate (401 authentication_failed), generating nothing',
    async (_name, who, method, route, body) => {
      expect(await call(who, method, route, body)).toEqual({ status: 401, code: 'authentication_failed' });
      expect(engine.stats().generatedTokens).toBe(0);
    },
  );

  it.each([
    ['a chat completion', 'POST', '/v1/chat/completions', chat],
    ['a stop', 'POST', '/v1/stop/gen_1', undefined],
  ] as const)('refuses %s from a verified service other than the relay (403 permission_denied)', async (_name, method, route, body) => {
    expect(await call('gateway', method, route, body)).toEqual({ status: 403, code: 'permission_denied' });
    expect(await call('reconcile', method, route, body)).toEqual({ status: 403, code: 'permission_denied' });
    expect(engine.stats().generatedTokens).toBe(0);
  });

  it('keeps /healthz and /readyz open to probes without a certificate', async () => {
    expect((await call('none', 'GET', '/healthz')).status).toBe(200);
    expect((await call('none', 'GET', '/readyz')).status).toBe(200);
  });

  it('lets each service reach what it needs: the gateway counts, reconcile reads usage, the relay generates through its adapter', async () => {
    expect((await call('gateway', 'POST', '/tokenize', { input: 'hi' })).status).toBe(200);
    expect(await call('reconcile', 'GET', '/v1/generations/gen_x/usage')).toEqual({ status: 404, code: 'not_found' });
    const revision = { id: 'sim@1', engine: { kind: 'llamacpp' }, contextWindow: 4096, replicas: [{ id: 'sim@1/0', baseUrl: `${origin}/v1`, slots: 4 }] } as unknown as RevisionSpec;
    const counter = replicaTokenCounter(revision, { dispatcher: as('gateway') });
    expect(await counter?.({ kind: 'text', text: 'hi' })).toBeGreaterThan(0);
    const adapter = createReplicaEngine(revision, { id: 'sim@1/0', baseUrl: `${origin}/v1`, slots: 4 }, { dispatcher: as('relay') });
    const ok = await collectEngineEvents(adapter, engineRequest({ kind: 'text', text: 'hi' }, { maxOutputTokens: 3 }));
    expect(ok.error).toBeUndefined();
    expect(ok.events[ok.events.length - 1]).toMatchObject({ type: 'end', usage: { outputTokens: 3 } });
    // Without the agent (undici's global dispatcher: no client certificate, public CAs) it cannot.
    const bare = createReplicaEngine(revision, { id: 'sim@1/0', baseUrl: `${origin}/v1`, slots: 4 });
    const refused = await collectEngineEvents(bare, engineRequest({ kind: 'text', text: 'hi' }, { maxOutputTokens: 3 }));
    expect((refused.error as { code?: string }).code).toMatch(/^upstream_/); // the engine's certificate is not from a public CA
    expect(refused.events.filter((e) => e.type === 'delta')).toEqual([]);
  });
});
