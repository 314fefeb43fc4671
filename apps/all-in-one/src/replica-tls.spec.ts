/**
 * The all-in-one serving a revision through an engine replica that requires mutual TLS (issue
 * 14 part 8): with the `replicaDispatcher` main.ts builds from `WEIR_TLS_*` (a certificate
 * naming the relay and the gateway) it generates, counts prompt tokens and probes over HTTPS;
 * without it the replica refuses it and the request fails rather than reaching the engine.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createEngineServer, defaultEnginePeerPolicies, listenEngineServer } from '@weir/engine-server';
import { createSimulatedEngine, type SimulatedEngine, silentLogger } from '@weir/engines';
import { createServiceTlsAgent, issueDevPki, loadServiceTls, type ServiceTls } from '@weir/service-tls';
import type { Agent } from 'undici';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_replitls_' + 'T'.repeat(43);
let dir: string;
let engine: SimulatedEngine;
let server: Server;
let origin: string;
let agent: Agent;
const platforms: TestPlatform[] = [];

const config = (baseUrl: string) => `revisions:
  - id: sim@1
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1]], kv_tokens: 65536, max_sequences: 2 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 8
    pricing: { input_per_mtok: 0.5, output_per_mtok: 1.5 }
    replicas:
      - { id: sim@1/0, base_url: ${baseUrl}/v1, slots: 2 }
aliases:
  - name: sim
    revision: sim@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'weir-aio-replica-tls-'));
  const pki = await issueDevPki({ dir: path.join(dir, 'tls'), certificates: [{ name: 'engine' }, { name: 'all-in-one', identities: ['gateway', 'scheduler', 'relay'] }] });
  const engineTls = loadServiceTls(pki.env('engine'), { service: 'engine', defaultPeers: ['relay'] }) as ServiceTls;
  agent = createServiceTlsAgent(loadServiceTls(pki.env('all-in-one'), { service: 'relay' }) as ServiceTls, { expectedServer: 'engine' });
  engine = createSimulatedEngine({ kind: 'simulated', prefillTokensPerSecond: 1_000_000, decodeStepMs: [[1, 1]], kvTokens: 65536, maxSequences: 2, seed: 1 });
  const app = createEngineServer({ engine, modelName: 'sim@1', logger: silentLogger, peers: defaultEnginePeerPolicies(engineTls.allowedPeers) });
  server = await new Promise<Server>((resolve) => {
    const s = listenEngineServer(app, { port: 0, host: '127.0.0.1', tls: engineTls }, () => resolve(s));
  });
  origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const p of platforms) await p.stop();
  await agent.close();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

async function complete(url: string): Promise<{ status: number; completionTokens: number }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 5 }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = (await res.json()) as { usage?: { completion_tokens: number } };
  return { status: res.status, completionTokens: body.usage?.completion_tokens ?? 0 };
}

describe('all-in-one with an engine replica that requires mutual TLS', () => {
  it('generates through it with the replica dispatcher', async () => {
    const t = await startTestPlatform('replica-tls', config(origin), DEMO_KEY, { platform: { replicaDispatcher: agent } });
    platforms.push(t);
    expect(await complete(t.platform.url)).toEqual({ status: 200, completionTokens: 5 });
    expect(engine.stats().generatedTokens).toBe(5);
  });

  it('is refused by it without one, and the engine generates nothing', async () => {
    const before = engine.stats().generatedTokens;
    const t = await startTestPlatform('replica-no-tls', config(origin), DEMO_KEY);
    platforms.push(t);
    const res = await complete(t.platform.url);
    expect(res.status).toBeGreaterThanOrEqual(500);
    expect(engine.stats().generatedTokens).toBe(before);
  });
});
