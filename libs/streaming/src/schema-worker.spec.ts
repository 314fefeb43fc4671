import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createSchemaWorker, type SchemaWorker } from './schema-worker';

/** A pseudo-random string of `a` and `b` (deterministic): it defeats RE2's DFA for the pattern below. */
function randomAb(length: number): string {
  let seed = 1;
  let out = '';
  for (let i = 0; i < length; i++) {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    out += seed % 1_024 < 512 ? 'a' : 'b';
  }
  return out;
}

/** About 600 RE2 instructions on strings that defeat its DFA: each 16 KiB string costs tens of ms or more of (linear-time) matching. */
const SLOW = JSON.stringify({ type: 'array', items: { type: 'string', pattern: '(a|b)*a(a|b){200}$' } });
const SLOW_OUTPUT = JSON.stringify(Array.from({ length: 200 }, () => randomAb(16_384)));

describe('schema worker', () => {
  let worker: SchemaWorker;
  afterEach(() => worker.close());

  it('compiles and checks off the main thread, naming paths and never quoting the output', async () => {
    worker = createSchemaWorker();
    const key = JSON.stringify({ type: 'object', properties: { id: { type: 'string', pattern: '^[A-Z]{2}-\\d{4}$' } }, required: ['id'] });
    expect(await worker.compile(key, 'output_schema')).toEqual({ ok: true });
    expect(await worker.check(key, '{"id":"AB-1234"}')).toEqual({ ok: true, value: { id: 'AB-1234' } });
    expect(await worker.check(key, '{"id":"secret-value"}')).toEqual({ ok: false, message: expect.stringContaining('`/id` must match pattern') });
    expect(await worker.check(key, 'secret text')).toEqual({ ok: false, message: 'the output (11 bytes) is not a complete JSON document' });
    expect(await worker.compile(JSON.stringify({ type: 'objec' }), 'my_schema')).toEqual({ ok: false, message: expect.stringContaining('my_schema/type must be equal to one of the allowed values') });
  });

  it('keeps the event loop free while a slow check runs, stops it at its time limit and serves the next job on a fresh worker', async () => {
    worker = createSchemaWorker({ checkTimeoutMs: 300 });
    expect(await worker.compile(SLOW, 'output_schema')).toEqual({ ok: true });
    const fine = JSON.stringify({ type: 'string' });
    const histogram = monitorEventLoopDelay({ resolution: 10 });
    histogram.enable();
    const ticks: number[] = [];
    const ticker = setInterval(() => ticks.push(Date.now()), 20);
    const [slow, next] = await Promise.all([worker.check(SLOW, SLOW_OUTPUT), worker.check(fine, '"ok"')]);
    clearInterval(ticker);
    histogram.disable();
    // 200 strings of 16 KiB take seconds to match: the limit stopped the check, which failed saying so.
    expect(slow).toEqual({ ok: false, message: 'checking the output against its schema took longer than 300 ms' });
    // The job behind it ran on the replacement worker.
    expect(next).toEqual({ ok: true, value: 'ok' });
    // The main thread kept turning meanwhile (a generous bound: the check alone takes seconds).
    expect(ticks.length).toBeGreaterThan(3);
    expect(histogram.max / 1e6).toBeLessThan(1_000);
  });

  it('refuses a schema whose compilation runs past its limit', async () => {
    worker = createSchemaWorker({ compileTimeoutMs: 1 });
    const big = JSON.stringify({ type: 'object', properties: Object.fromEntries(Array.from({ length: 1_500 }, (_, i) => [`p${i}`, { type: 'string', pattern: `^[a-z]{1,${(i % 50) + 1}}$` }])) });
    expect(await worker.compile(big, 'output_schema')).toEqual({ ok: false, message: 'compiling the schema took longer than 1 ms' });
  });

  it('answers jobs still waiting when it is closed', async () => {
    worker = createSchemaWorker();
    const pending = worker.compile(SLOW, 'output_schema');
    await worker.close();
    expect(await pending).toEqual({ ok: false, message: 'the schema worker is closed' });
  });
});
