/**
 * The usage API and the burn-rate alert end to end, one body for both compositions: a
 * request's usage is visible at `GET /v1/usage` within 2 s of its end, broken down by model,
 * app and use case, exactly as the request was billed; and its spend (no baseline, a floor of
 * 0) raises one burn-rate alert.
 */
import { DEMO_KEY, E2E_CONFIG } from './fixtures';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON bodies in assertions
type Json = any;

/** The bound: usage visible within 2 s of a request's end. */
export const USAGE_VISIBLE_WITHIN_MS = 2_000;

/** Burn-rate checks in the usage suites run this often (ms), so an alert comes quickly. */
export const E2E_BURN_RATE_INTERVAL_MS = 250;

/**
 * The e2e configuration with `defaults.admission.burn_rate_min_hourly_usd: 0`: the tiny
 * model's requests cost micro-dollars, so without a floor the demo tenant (no baseline)
 * alerts after its first request.
 */
export const USAGE_E2E_CONFIG = (() => {
  const yaml = E2E_CONFIG.replace('\ndefaults:\n', '\ndefaults:\n  admission: { burn_rate_min_hourly_usd: 0 }\n');
  if (yaml === E2E_CONFIG) throw new Error('E2E_CONFIG has no defaults section to extend');
  return yaml;
})();

/** A running composition, as the usage suite sees it. */
export interface UsageTopology {
  /** Gateway base URLs (the split topology's two; the all-in-one's one). */
  urls: string[];
  /** Resolves with the first burn-rate alert for `tenant` (the event, or what the metrics show of it). */
  burnRateAlert(tenant: string, timeoutMs: number): Promise<{ tenant_id: string; factor?: number }>;
  /** Σ of `weir_burn_rate_alerts_total{tenant}` where the check runs. */
  burnRateAlertsCounted(tenant: string): Promise<number>;
  output(): string;
  /** Graceful stop; true when every process exited 0. */
  stop(): Promise<boolean>;
}

/** Sums a counter's samples for one tenant in a Prometheus text scrape. */
export function sumTenantCounter(metricsText: string, name: string, tenant: string): number {
  let total = 0;
  for (const line of metricsText.split('\n')) {
    if (line.startsWith(`${name}{`) && line.includes(`tenant="${tenant}"`)) total += Number(line.split(' ').at(-1));
  }
  return total;
}

/** Defines the usage suite against the topology `start` creates. */
export function describeUsageSuite(name: string, start: () => Promise<UsageTopology>): void {
  describe(`usage and burn rate: ${name}`, () => {
    let weir: UsageTopology;
    beforeAll(async () => {
      weir = await start();
    });
    afterAll(async () => {
      if (weir) expect(await weir.stop()).toBe(true);
    });

    const auth = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };
    const usage = async (query = '', url = weir.urls.at(-1) as string): Promise<Json> => {
      const res = await fetch(`${url}/v1/usage${query}`, { headers: auth });
      expect(res.status).toBe(200);
      return res.json();
    };

    /** Polls `/v1/usage` on the last gateway until `done(body)`; returns the body and when it first held (ms after `since`). */
    async function pollUsage(done: (body: Json) => boolean, since: number, query = ''): Promise<{ body: Json; afterMs: number }> {
      const giveUp = since + 10_000; // generous: the assertion is on afterMs, not on this
      for (;;) {
        const body = await usage(query);
        if (done(body)) return { body, afterMs: Date.now() - since };
        if (Date.now() > giveUp) throw new Error(`usage never showed the request: ${JSON.stringify(body)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }

    it(`shows a finished request in /v1/usage within ${USAGE_VISIBLE_WITHIN_MS} ms, under its use case, at the billed cost`, async () => {
      const before = await usage('?window=day');
      const res = await fetch(`${weir.urls[0]}/v1/generations`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ model_alias: 'tiny-stories', input: 'Once upon a time', max_output_tokens: 16, temperature: 0, use_case: 'e2e.usage' }),
      });
      expect(res.status).toBe(200);
      const generation: Json = await res.json();
      const ended = Date.now(); // the request's end, as the client sees it

      const { body, afterMs } = await pollUsage((b) => b.requests === before.requests + 1, ended, '?window=day');
      expect(afterMs).toBeLessThan(USAGE_VISIBLE_WITHIN_MS);

      const billedNano = BigInt(Math.round(generation.usage.cost_usd * 1e9));
      expect(BigInt(body.cost_nano_usd) - BigInt(before.cost_nano_usd)).toBe(billedNano);
      expect(body.tokens.input - before.tokens.input).toBe(generation.usage.input_tokens);
      expect(body.tokens.output - before.tokens.output).toBe(generation.usage.output_tokens);
      expect(body.tokens.total).toBe(body.tokens.input + body.tokens.output);
      const useCase = body.by_use_case.find((u: Json) => u.use_case === 'e2e.usage');
      expect(useCase).toMatchObject({ requests: 1, cost_nano_usd: billedNano.toString(), tokens: { output: generation.usage.output_tokens } });
      expect(body.by_model).toEqual([expect.objectContaining({ model_alias: 'tiny-stories', model_revision: 'stories260k@1' })]);
      expect(body.by_app).toEqual([expect.objectContaining({ app_id: 'demo-app', requests: body.requests })]);
      expect(body).toMatchObject({ object: 'usage', tenant_id: 'demo', window: 'day' });
    });

    it('takes the use case from x-weir-use-case on the OpenAI routes, and reports requests without one as null', async () => {
      const send = (headers: Record<string, string>) =>
        fetch(`${weir.urls[0]}/v1/chat/completions`, {
          method: 'POST',
          headers: { ...auth, ...headers },
          body: JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Lily' }], max_tokens: 4, stream: true }),
        }).then(async (r) => {
          expect(r.status).toBe(200);
          await r.text();
        });
      await send({ 'x-weir-use-case': 'e2e:chat-header' });
      await send({});
      const ended = Date.now();
      const { body, afterMs } = await pollUsage(
        (b) => b.by_use_case.some((u: Json) => u.use_case === 'e2e:chat-header') && b.by_use_case.some((u: Json) => u.use_case === null),
        ended,
      );
      expect(afterMs).toBeLessThan(USAGE_VISIBLE_WITHIN_MS);
      expect(body.window).toBe('month');
      const sum = body.by_use_case.reduce((n: bigint, u: Json) => n + BigInt(u.cost_nano_usd), 0n);
      expect(sum).toBe(BigInt(body.cost_nano_usd));
    });

    it('refuses another tenant, an unknown window and a bad use case with 400s that say what to fix', async () => {
      const url = weir.urls[0];
      for (const [query, param] of [
        ['?tenant=other', 'tenant'],
        ['?window=year', 'window'],
      ]) {
        const res = await fetch(`${url}/v1/usage${query}`, { headers: auth });
        expect(res.status).toBe(400);
        expect(((await res.json()) as Json).error).toMatchObject({ type: 'invalid_request_error', param });
      }
      const bad = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { ...auth, 'x-weir-use-case': 'no spaces please' }, body: JSON.stringify({ model: 'tiny-stories', prompt: 'x' }) });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as Json).error.param).toBe('x-weir-use-case');
      expect((await fetch(`${url}/v1/usage`)).status).toBe(401);
    });

    it('raises one burn-rate alert for the demo tenant (spend, no baseline, floor 0) and counts it', async () => {
      const alert = await weir.burnRateAlert('demo', 15_000);
      expect(alert.tenant_id).toBe('demo');
      // Checks keep running every E2E_BURN_RATE_INTERVAL_MS: the debounce keeps it at one an hour.
      await new Promise((r) => setTimeout(r, 4 * E2E_BURN_RATE_INTERVAL_MS));
      expect(await weir.burnRateAlertsCounted('demo')).toBe(1);
      expect(weir.output()).toMatch(/burn-rate alert/);
    });
  });
}
