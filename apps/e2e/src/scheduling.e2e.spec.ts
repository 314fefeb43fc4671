/**
 * Scheduling over HTTP on the all-in-one as `npm start` runs it: a request that cannot start
 * before its deadline is answered at once with 503 `deadline_unmeetable` and `Retry-After`
 * (ARCHITECTURE.md §8), holds nothing, and the busy generation is not disturbed; the scheduler's
 * rejection is counted by pool, tenant and reason.
 */
import { removeDir, startAllInOne, type AllInOneProcess } from './support/all-in-one-process';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';

jest.setTimeout(120_000);

/** The slow revision (40 ms per token) with one sequence, so one long generation fills it. */
const ONE_SLOW_SEQUENCE = (() => {
  const yaml = E2E_CONFIG.replace('sequences: 2, test_token_delay_ms: 40', 'sequences: 1, test_token_delay_ms: 40');
  if (yaml === E2E_CONFIG) throw new Error('E2E_CONFIG no longer has the slow revision this test narrows');
  return yaml;
})();

describe('scheduling over HTTP (all-in-one)', () => {
  let weir: AllInOneProcess;
  const auth = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };
  beforeAll(async () => {
    weir = await startAllInOne({ configYaml: ONE_SLOW_SEQUENCE, env: { WEIR_DEMO_API_KEY: DEMO_KEY } });
  });
  afterAll(async () => {
    if (!weir) return;
    expect(await weir.stop()).toBe(0);
    removeDir(weir.dataDir);
  });

  it('answers 503 deadline_unmeetable with Retry-After when the estimated start is past the deadline', async () => {
    // 200 tokens at 40 ms each: the only sequence is busy for about 8 s.
    const busy = new AbortController();
    const long = await fetch(`${weir.url}/v1/generations`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200, stream: true }),
      signal: busy.signal,
    });
    expect(long.status).toBe(200);
    const reader = (long.body as ReadableStream<Uint8Array>).getReader();
    await reader.read(); // the first event: the generation holds the sequence

    const started = Date.now();
    const res = await fetch(`${weir.url}/v1/generations`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ model_alias: 'tiny-stories-slow', input: 'Lily and Tom', max_output_tokens: 100, deadline_ms: 1_000 }),
    });
    const body = (await res.json()) as { error: { code: string; type: string; message: string } };
    expect(res.status).toBe(503);
    expect(body.error).toMatchObject({ code: 'deadline_unmeetable', type: 'server_error' });
    expect(body.error.message).toContain('deadline');
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(res.headers.get('x-request-id')).toBeTruthy();
    // Rejected at once, not after waiting for the deadline.
    expect(Date.now() - started).toBeLessThan(1_000);

    const metrics = await (await fetch(`${weir.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/weir_scheduler_rejections_total\{[^}]*pool="interactive"[^}]*tenant="demo"[^}]*reason="deadline_unmeetable"[^}]*\} 1/);

    busy.abort();
    await reader.cancel().catch(() => undefined);
  });
});
