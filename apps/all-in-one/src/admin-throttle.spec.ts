/**
 * Guessing admin tokens on the all-in-one's port (issue 14 part 7; docs/security.md §7): failed
 * admin tokens are counted per client as the public listener sees it — the peer, or behind a
 * trusted proxy the forwarded client — and past `WEIR_AUTH_FAILURE_LIMIT` that client gets 429
 * with `Retry-After` on `/admin/v1` whatever token it sends. The count is the admin API's own:
 * the same address's API-key requests are still served, and so is the admin token from
 * elsewhere. Simulated engine; requests from distinct loopback addresses (127.0.0.x).
 */
import { request } from 'node:http';
import { DEFAULT_CLIENT_LIMITS } from '@weir/service-runtime';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_admthrot_' + 'T'.repeat(43);
const LIMIT = 3;
const PROXY = '127.0.0.3';

const CONFIG = `revisions:
  - id: chat@1
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1]], max_sequences: 8 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 4
    pricing: { input_per_mtok: 1, output_per_mtok: 2 }
aliases:
  - name: chat
    revision: chat@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

let running: TestPlatform | undefined;
let platform: Platform;

beforeAll(async () => {
  running = await startTestPlatform('admin-throttle', CONFIG, DEMO_KEY, {
    platform: { clientLimits: { ...DEFAULT_CLIENT_LIMITS, trustedProxies: [PROXY], authFailureLimit: LIMIT } },
  });
  platform = running.platform;
});

afterAll(async () => {
  await running?.stop();
});

/** A request from local address `from`: status and `Retry-After`. */
function send(from: string, method: string, urlPath: string, headers: Record<string, string>, body?: string): Promise<{ status: number; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request(`${platform.url}${urlPath}`, { method, localAddress: from, agent: false, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const bearer = (token: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${token}`, ...extra });
const wrong = (i: number) => `wa_guess${String(i).padStart(3, '0')}_${'x'.repeat(43)}`;
const tenants = (from: string, token: string, extra: Record<string, string> = {}) => send(from, 'GET', '/admin/v1/tenants', bearer(token, extra));
const chat = (from: string) =>
  send(from, 'POST', '/v1/chat/completions', bearer(DEMO_KEY, { 'content-type': 'application/json' }), JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }));

describe('admin token guessing on the all-in-one', () => {
  it('refuses an address past the limit with 429 and Retry-After, even with the right token; its API keys and other addresses are served', async () => {
    const token = platform.adminToken as string;
    expect(await tenants('127.0.0.1', token)).toMatchObject({ status: 200 });
    for (let i = 0; i < LIMIT; i++) expect((await tenants('127.0.0.2', wrong(i))).status).toBe(401);
    const refused = await tenants('127.0.0.2', token);
    expect(refused.status).toBe(429);
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(DEFAULT_CLIENT_LIMITS.authFailureWindowMs / 1000);
    // The admin API's count is its own: the gateway still serves that address's API key.
    expect((await chat('127.0.0.2')).status).toBe(200);
    expect(await tenants('127.0.0.1', token)).toMatchObject({ status: 200 });
  });

  it('behind a trusted proxy counts the forwarded client, not the proxy', async () => {
    const token = platform.adminToken as string;
    const via = (client: string) => ({ 'x-forwarded-for': client });
    for (let i = 0; i < LIMIT; i++) expect((await tenants(PROXY, wrong(i), via('198.51.100.7'))).status).toBe(401);
    expect((await tenants(PROXY, token, via('198.51.100.7'))).status).toBe(429);
    expect((await tenants(PROXY, token, via('198.51.100.8'))).status).toBe(200);
  });
});
