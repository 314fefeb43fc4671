/**
 * A model that fails before its first token, over HTTP: a transient failure answers a
 * retryable 503 with `Retry-After` (the upstream's hint, else 1 s) and says to retry; a
 * permanent one answers without; one usage record either way, billing nothing.
 */
import { createInMemoryAdmission } from '@weir/admission';
import { type EngineAdapter, type EngineEvent, WeirError } from '@weir/core';
import { fakeRevision, startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

const config = twoTenantConfig(fakeRevision({ inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 1 }));

/** An engine that throws `error` before any token. */
function failing(error: () => WeirError): EngineAdapter & { calls: number } {
  const engine = {
    kind: 'failing',
    capacity: { slots: 4, contextTokens: 4096 },
    calls: 0,
    countInputTokens: async () => 3,
    async *generate(): AsyncIterable<EngineEvent> {
      engine.calls++;
      throw error();
    },
    close: async () => undefined,
  };
  return engine;
}

describe('a model failing before its first token', () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  const chat = (stream = false) => gw!.post('/v1/chat/completions', { model: config.aliases[0].name, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, stream });

  it('answers a transient failure with a retryable 503, Retry-After and advice, and one usage record', async () => {
    const engine = failing(() => new WeirError('upstream_unavailable', 'upstream connection failed', { retryable: true }));
    gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }) });
    for (const stream of [false, true]) {
      const res = await chat(stream);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error).toMatchObject({ code: 'upstream_unavailable', message: expect.stringContaining('retry shortly') });
    }
    // The one replica was tried once per request (nowhere else to go), and each request recorded once.
    expect(engine.calls).toBe(2);
    expect(gw.records.map((r) => [r.status, r.errorCode, r.outputTokens])).toEqual([
      ['failed', 'upstream_unavailable', 0],
      ['failed', 'upstream_unavailable', 0],
    ]);
  });

  it("passes the upstream's own retry hint through", async () => {
    gw = await startTestGateway({ config, engine: failing(() => new WeirError('upstream_unavailable', 'upstream answered HTTP 429', { retryable: true, retryAfterMs: 7_000 })), admission: createInMemoryAdmission({ tenants: config.tenants }) });
    const res = await chat();
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('7');
  });

  it('answers a permanent failure without Retry-After', async () => {
    gw = await startTestGateway({ config, engine: failing(() => new WeirError('upstream_bad_request', 'upstream answered HTTP 400')), admission: createInMemoryAdmission({ tenants: config.tenants }) });
    const res = await chat();
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.headers.get('retry-after')).toBeNull();
    expect(gw.records).toHaveLength(1);
    // A failure before any output bills nothing (issue 13), though admission counted 3 input
    // tokens: the attempt is on the record, the charge is not.
    expect(gw.records[0]).toMatchObject({ inputTokens: 0, outputTokens: 0, costNanoUsd: 0, usageSource: 'reported' });
    expect(gw.records[0].attempts).toEqual([expect.objectContaining({ attempt: 1, revisionId: 'fake@1', outcome: 'failed', errorCode: 'upstream_bad_request' })]);
  });
});
