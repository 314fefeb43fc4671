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

describe('schema worker: tenants take turns', () => {
  let worker: SchemaWorker;
  afterEach(() => worker.close());

  /** A distinct schema per call (never cached), so each compilation pays the injected delay. */
  let salt = 0;
  const fresh = () => JSON.stringify({ type: 'object', properties: { [`p${salt++}`]: { type: 'string' } } });

  it("serves another tenant's job after at most about one job of a tenant's burst, not after the whole burst", async () => {
    worker = createSchemaWorker({ compileDelayMs: 150, maxQueuedPerTenant: 100 });
    const order: string[] = [];
    const burst = Array.from({ length: 8 }, (_, i) => worker.compile(fresh(), 'output_schema', 'tenant-a').then((r) => (order.push(`a${i}`), r)));
    const b = worker.compile(JSON.stringify({ type: 'object', properties: { name: { type: 'string', maxLength: 10 } } }), 'output_schema', 'tenant-b').then((r) => (order.push('b'), r));
    expect(await b).toEqual({ ok: true });
    // Only the job already running when B arrived (a generous bound: 2) came before it; FIFO would put all 8 first.
    const before = order.indexOf('b');
    expect(before).toBeGreaterThanOrEqual(0);
    expect(before).toBeLessThanOrEqual(2);
    for (const r of await Promise.all(burst)) expect(r).toEqual({ ok: true });
    expect(order).toHaveLength(9);
  });

  it('alternates between tenants with jobs waiting', async () => {
    worker = createSchemaWorker({ compileDelayMs: 50, maxQueuedPerTenant: 100 });
    const order: string[] = [];
    const jobs = [
      ...Array.from({ length: 3 }, () => worker.compile(fresh(), 'output_schema', 'a').then(() => order.push('a'))),
      ...Array.from({ length: 3 }, () => worker.compile(fresh(), 'output_schema', 'b').then(() => order.push('b'))),
    ];
    await Promise.all(jobs);
    expect(order).toEqual(['a', 'b', 'a', 'b', 'a', 'b']);
  });

  it("refuses a tenant's compilation beyond its cap at once, while other tenants and output checks still get in", async () => {
    worker = createSchemaWorker({ compileDelayMs: 100, maxQueuedPerTenant: 2 });
    const first = worker.compile(fresh(), 'output_schema', 'greedy');
    const second = worker.compile(fresh(), 'output_schema', 'greedy');
    const third = await worker.compile(fresh(), 'output_schema', 'greedy');
    expect(third).toEqual({ ok: false, busy: true, message: expect.stringContaining('2 schema jobs of this tenant') });
    const other = worker.compile(fresh(), 'output_schema', 'modest');
    const known = JSON.stringify({ type: 'string' });
    const check = worker.check(known, '"x"', 'greedy');
    expect(await first).toEqual({ ok: true });
    expect(await second).toEqual({ ok: true });
    expect(await other).toEqual({ ok: true });
    expect(await check).toEqual({ ok: true, value: 'x' });
    // Once its jobs are done, the tenant may compile again.
    expect(await worker.compile(fresh(), 'output_schema', 'greedy')).toEqual({ ok: true });
  });

  it('keeps serving the other tenants after a job runs past its limit', async () => {
    worker = createSchemaWorker({ compileDelayMs: 400, compileTimeoutMs: 200, maxQueuedPerTenant: 100 });
    const [a, b] = await Promise.all([worker.compile(fresh(), 'output_schema', 'a'), worker.compile(fresh(), 'output_schema', 'b')]);
    expect(a).toEqual({ ok: false, message: 'compiling the schema took longer than 200 ms' });
    expect(b).toEqual({ ok: false, message: 'compiling the schema took longer than 200 ms' });
    // The replacement worker still answers (its check compiles first, within the check's 1 s limit).
    expect(await worker.check(JSON.stringify({ type: 'string' }), '"y"', 'a')).toEqual({ ok: true, value: 'y' });
  });
});
