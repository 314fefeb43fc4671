/**
 * Session budgets through the running gateway (issue 16 item 6): `x-weir-session-id` on an app
 * that allows sessions caps the session's lifetime tokens; a runaway loop gets a 429 naming the
 * session (not retryable), while another session, and the app's requests without one, run on;
 * a malformed id is a 400 before any work; an app without session caps ignores the header.
 */
import { createInMemoryAdmission, createSessionBudgets } from '@weir/admission';
import type { PlatformConfig } from '@weir/core';
import { createScriptedEngine, type ScriptedEngine } from '@weir/testing';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

/** Tenant `t`'s app `a` caps sessions at 30 tokens (a request holds 7 + 8 = 15 and settles at 7 + 4 = 11). */
function config(): PlatformConfig {
  const base = twoTenantConfig();
  return { ...base, tenants: base.tenants.map((t) => (t.id === 't' ? { ...t, apps: [{ id: 'a', name: 'A', limits: { sessionMaxTokens: 30 } }] } : t)) };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies are read loosely
const json = async (res: Response): Promise<any> => res.json();
const chat = { model: 'fake', messages: [{ role: 'user', content: 'next step' }], max_tokens: 8 };

let gw: TestGateway | undefined;
let engine: ScriptedEngine;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

async function start(): Promise<TestGateway> {
  const c = config();
  engine = createScriptedEngine();
  const sessions = createSessionBudgets({ tenants: c.tenants });
  gw = await startTestGateway({ config: c, engine, admission: sessions.wrap(createInMemoryAdmission({ tenants: c.tenants })) });
  return gw;
}

describe('x-weir-session-id', () => {
  it('a runaway agent loop stops at its session cap with a 429 naming the session; other sessions and plain requests run', async () => {
    const g = await start();
    const run = { 'x-weir-session-id': 'agent-run-7' };
    expect((await g.post('/v1/chat/completions', chat, run)).status).toBe(200);
    expect((await g.post('/v1/chat/completions', chat, run)).status).toBe(200);
    const refused = await g.post('/v1/chat/completions', chat, run);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-should-retry')).toBe('false');
    const { error } = await json(refused);
    expect(error.code).toBe('budget_exhausted');
    expect(error.message).toMatch(/^Session 'agent-run-7' has reached its cap of 30 tokens: 22 used and 0 held/);
    expect((await g.post('/v1/chat/completions', chat, { 'x-weir-session-id': 'agent-run-8' })).status).toBe(200);
    expect((await g.post('/v1/chat/completions', chat)).status).toBe(200);
    expect(engine.requests).toHaveLength(4);
  });

  it('a malformed session id is a 400 naming the header, before any work', async () => {
    const g = await start();
    const res = await g.post('/v1/chat/completions', chat, { 'x-weir-session-id': 'has space' });
    expect(res.status).toBe(400);
    expect((await json(res)).error.param).toBe('x-weir-session-id');
    expect(engine.requests).toHaveLength(0);
  });

  it('an app without session caps ignores the header', async () => {
    const g = await start();
    for (let i = 0; i < 4; i++) expect((await g.post('/v1/chat/completions', chat, { 'x-weir-session-id': 'loop' }, g.otherKey.plaintext)).status).toBe(200);
  });
});
