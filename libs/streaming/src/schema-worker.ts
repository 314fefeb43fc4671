/**
 * The schema worker (issue 14 part 1): compiles the JSON Schemas tenants send and checks outputs
 * against them on a worker thread, so no schema can hold the event loop that serves every other
 * tenant. Measured on the main thread before it (ajv 8.20, Node 20): compiling a 64 KiB schema of
 * patterned properties takes ajv about 0.6 s; `uniqueItems` is quadratic in an array's length;
 * RE2 matches in linear time, but a large program that defeats its DFA costs microseconds per
 * character of every string it is matched against.
 *
 * One worker serves the process and runs one job at a time; jobs wait in a queue per tenant and
 * the tenants take turns (round-robin), so one tenant's burst delays another's job by about one
 * job; a tenant may hold at most {@link DEFAULT_MAX_QUEUED_PER_TENANT} jobs (more compilations
 * are refused at once). A job that runs past its time limit (compile
 * {@link DEFAULT_COMPILE_TIMEOUT_MS}, check {@link DEFAULT_CHECK_TIMEOUT_MS}) fails with a
 * message saying so; the worker is then terminated and a fresh one takes the jobs still waiting
 * (a job is never left unanswered).
 * `pattern` and `patternProperties` run on RE2 (re2js), as {@link schemaEngine} says.
 */
import { Worker } from 'node:worker_threads';
import { ACCEPTED_DIALECTS_TEXT, SCHEMA_DIALECT_KEYS, type SchemaDialect } from './schema-dialects';

/** Time (ms) a schema's compilation may take on the worker before the request gets a 400. */
export const DEFAULT_COMPILE_TIMEOUT_MS = 2_000;

/** Time (ms) one output's check may take on the worker before it ends as `output_invalid`. */
export const DEFAULT_CHECK_TIMEOUT_MS = 1_000;

/**
 * Largest compiled program of one `pattern` or `patternProperties` key (RE2 instructions). RE2
 * matches in time linear in the text, times (at worst) the program's size: `^[A-Z]{2}-\d{4}$` is
 * 11 instructions, an e-mail pattern about 320; `(a|b)*a(a|b){1000}` (3,008) is refused.
 */
export const MAX_PATTERN_PROGRAM = 1_000;

/** Compiled schemas the worker keeps (by their JSON text), most recently used last. */
const WORKER_CACHE_SIZE = 256;

/** Validation errors listed in an `output_invalid` message. */
export const MAX_LISTED_ERRORS = 5;

/**
 * A compilation's result: `message` says why the schema is unusable (ajv's or RE2's reason);
 * `busy` when it was not compiled because its tenant already has
 * {@link SchemaWorkerOptions.maxQueuedPerTenant} jobs waiting or running (retry shortly).
 */
export type SchemaCompileResult = { ok: true } | { ok: false; message: string; busy?: true };

/** Jobs one tenant may have waiting or running on the schema worker before its compilations are refused (429). */
export const DEFAULT_MAX_QUEUED_PER_TENANT = 4;

/** A check's result: the parsed document, or why it does not match (never quoting the output). */
export type SchemaCheckResult = { ok: true; value: unknown } | { ok: false; message: string };

/** Options of {@link createSchemaWorker}. */
export interface SchemaWorkerOptions {
  /** Default {@link DEFAULT_COMPILE_TIMEOUT_MS}. */
  compileTimeoutMs?: number;
  /** Default {@link DEFAULT_CHECK_TIMEOUT_MS}. */
  checkTimeoutMs?: number;
  /**
   * Jobs one tenant may have waiting or running at once (default
   * {@link DEFAULT_MAX_QUEUED_PER_TENANT}); a compile beyond it is refused at once
   * (`{ok: false, busy: true}`). Output checks are never refused (admission bounds them).
   */
  maxQueuedPerTenant?: number;
  /** Tests only: the worker sleeps this long (ms) before each compilation that is not cached, as a slow schema would. Default 0. */
  compileDelayMs?: number;
}

/** Compiles and checks schemas off the main thread. */
export interface SchemaWorker {
  /**
   * Compiles `key` (a schema's compact JSON text) after checking it against the meta-schema of
   * the draft its `$schema` declares (draft-07, 2019-09, or 2020-12 when absent), with that
   * draft's ajv class; `paramName` names the schema in the meta-schema's messages. `tenant` (the
   * caller's internal id, `tenantKeyOf`; default `''`) picks the queue the job waits in; with
   * `capped` (default true) a tenant over its cap gets `{ok: false, busy: true}` at once. Never rejects.
   */
  compile(key: string, paramName: string, tenant?: string, options?: { capped?: boolean }): Promise<SchemaCompileResult>;
  /** Parses `text` as JSON and validates it against the schema `key` (compiled first if needed), in `tenant`'s queue (never capped). Never rejects. */
  check(key: string, text: string, tenant?: string): Promise<SchemaCheckResult>;
  /** Stops the worker; jobs still waiting are answered with a failure. */
  close(): Promise<void>;
}

/** What the worker needs to know (passed as `workerData`). */
interface WorkerData {
  /** The module of ajv's class for each draft (`ajv` is draft-07, `ajv/dist/2019`, `ajv/dist/2020`). */
  ajvPaths: Record<SchemaDialect, string>;
  /** The dialect of each accepted `$schema`, keyed as `dialectKeyOf` says (scheme and trailing `#` dropped). */
  dialectKeys: Readonly<Record<string, SchemaDialect>>;
  /** The accepted `$schema` values, for the message refusing another. */
  acceptedDialects: string;
  re2Path: string;
  maxPatternProgram: number;
  cacheSize: number;
  maxListedErrors: number;
  /** Tests only: ms to sleep before each uncached compilation. */
  compileDelayMs?: number;
}

/** One job for the engine. */
export type Job = { id: number; op: 'compile'; key: string; paramName: string } | { id: number; op: 'check'; key: string; text: string };

/** Compiles and checks schemas on the thread that calls it (see {@link schemaEngine}). */
export interface SchemaEngine {
  /** Runs one job; never throws: a schema that cannot be compiled, or a failed check, is `{ok: false, message}`. */
  run(job: Job): SchemaCompileResult | SchemaCheckResult;
}

/**
 * The compiler and checker, as the worker runs them. It runs in a worker thread from its source
 * text, so it must stay self-contained: it may use only its parameters and globals, no import.
 */
function schemaEngine(load: (id: string) => unknown, data: WorkerData): SchemaEngine {
  type Validate = ((value: unknown) => boolean) & { errors?: { instancePath: string; message?: string; keyword: string }[] | null };
  type AjvLike = { validateSchema(schema: unknown): boolean; errors?: unknown; errorsText(errors: unknown, options: { dataVar: string }): string; compile(schema: unknown): Validate };
  type AjvClass = new (options: object) => AjvLike;
  const classes: Partial<Record<SchemaDialect, AjvClass>> = {};
  const classOf = (dialect: SchemaDialect): AjvClass => (classes[dialect] ??= (load(data.ajvPaths[dialect]) as { default: AjvClass }).default);
  // The draft a schema declares (2020-12 without `$schema`); the gateway refuses others before
  // sending them here, so this only guards a job that bypassed it.
  const dialectOf = (schema: Record<string, unknown>): SchemaDialect => {
    const declared = schema.$schema;
    if (declared === undefined) return '2020-12';
    const key = typeof declared === 'string' ? declared.replace(/^https?:\/\//, '').replace(/#$/, '') : undefined;
    if (key === undefined || !Object.hasOwn(data.dialectKeys, key)) {
      throw new Error(`its \`$schema\` names no supported draft; use one of ${data.acceptedDialects}, or omit it (2020-12)`);
    }
    return data.dialectKeys[key];
  };
  const { RE2JS } = load(data.re2Path) as {
    RE2JS: { compile(pattern: string): { test(text: string): boolean; programSize(): number }; translateRegExp(pattern: string): string };
  };
  const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
  // JSON Schema's ECMA-262 patterns on RE2: linear-time matching; lookaround and backreferences
  // (which RE2 cannot run in linear time) do not compile, and neither does a huge program.
  const re2RegExp = Object.assign(
    (pattern: string, flags: string) => {
      if (flags !== '' && flags !== 'u') throw new Error(`the pattern flags '${flags}' are not supported`);
      let re: { test(text: string): boolean; programSize(): number };
      try {
        re = RE2JS.compile(RE2JS.translateRegExp(pattern));
      } catch (err) {
        throw new Error(`the pattern ${JSON.stringify(pattern)} is not supported: ${messageOf(err)} (Weir matches patterns with RE2, which has no lookaround or backreferences)`);
      }
      const size = re.programSize();
      if (size > data.maxPatternProgram) {
        const shown = pattern.length > 80 ? `${pattern.slice(0, 80)}…` : pattern;
        throw new Error(`the pattern ${JSON.stringify(shown)} is too complex (${size} RE2 instructions, at most ${data.maxPatternProgram}); use smaller repetition counts`);
      }
      // ajv shares compiled patterns by `toString()`: it must differ per pattern.
      return { test: (text: string) => re.test(text), toString: () => `/${pattern}/${flags}` };
    },
    { code: 're2js' },
  );
  // Unknown keywords are errors (a typo such as `requried` would otherwise constrain nothing);
  // `format` is an annotation in every draft (as 2019-09 and 2020-12 say by default; no format's
  // own regular expression ever runs); every error is collected so the message can list the paths.
  const options = {
    strict: true,
    strictTypes: false,
    strictTuples: false,
    strictRequired: false,
    allErrors: true,
    validateFormats: false,
    logger: false,
    code: { regExp: re2RegExp },
  };
  // One meta-schema checker per draft, made on first use.
  const metas: Partial<Record<SchemaDialect, AjvLike>> = {};
  const compiled = new Map<string, Validate>();
  const compile = (key: string, paramName: string): Validate => {
    const known = compiled.get(key);
    if (known) {
      compiled.delete(key);
      compiled.set(key, known);
      return known;
    }
    const parsed = JSON.parse(key) as Record<string, unknown>;
    if (data.compileDelayMs) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, data.compileDelayMs);
    const dialect = dialectOf(parsed);
    const Ajv = classOf(dialect);
    // The class is the draft: ajv would look the declared URI up as written, and knows each
    // draft's meta-schema under one spelling only (the clients' http/https and `#` vary).
    const schema = { ...parsed };
    delete schema.$schema;
    const meta = (metas[dialect] ??= new Ajv(options));
    let valid: boolean;
    try {
      valid = meta.validateSchema(schema);
    } catch (err) {
      throw new Error(`it could not be checked (${messageOf(err)})`);
    }
    if (!valid) throw new Error(meta.errorsText(meta.errors, { dataVar: paramName }));
    // Each schema in its own instance, so a `$id` in one never clashes with another's.
    const validate = new Ajv({ ...options, validateSchema: false }).compile(schema);
    compiled.set(key, validate);
    if (compiled.size > data.cacheSize) compiled.delete(compiled.keys().next().value as string);
    return validate;
  };
  const check = (key: string, text: string): { ok: true; value: unknown } | { ok: false; message: string } => {
    const validate = compile(key, 'output_schema');
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      // JSON.parse's message quotes the text: say only where it broke down.
      return { ok: false, message: text.trim() === '' ? 'the output is empty, not a JSON document' : `the output (${Buffer.byteLength(text)} bytes) is not a complete JSON document` };
    }
    if (validate(value)) return { ok: true, value };
    // `/path` must …: the JSON Pointer of each failure and ajv's requirement, never the value.
    const errors = validate.errors ?? [];
    const listed = errors.slice(0, data.maxListedErrors).map((e) => `\`${e.instancePath || '/'}\` ${e.message ?? `fails \`${e.keyword}\``}`);
    const more = errors.length > data.maxListedErrors ? ` (and ${errors.length - data.maxListedErrors} more)` : '';
    return { ok: false, message: `the output does not match \`output_schema\`: ${listed.join('; ')}${more}` };
  };
  return {
    run(job) {
      try {
        if (job.op === 'compile') {
          compile(job.key, job.paramName);
          return { ok: true };
        }
        return check(job.key, job.text);
      } catch (err) {
        return { ok: false, message: messageOf(err) };
      }
    },
  };
}

const WORKER_SOURCE = [
  "const { workerData, parentPort } = require('node:worker_threads');",
  // Transpilers that keep function names (esbuild's keepNames, as tsx runs it) wrap functions in
  // a `__name` helper the source text refers to but does not carry: a no-op one here.
  'const __name = (fn) => fn;',
  `const engine = (${schemaEngine.toString()})(require, workerData);`,
  "parentPort.on('message', (job) => parentPort.postMessage({ id: job.id, result: engine.run(job) }));",
].join('\n');

/** What the worker (and {@link localSchemaEngine}) is told: where its modules are and its limits. */
function workerData(): WorkerData {
  return {
    ajvPaths: { 'draft-07': require.resolve('ajv'), '2019-09': require.resolve('ajv/dist/2019'), '2020-12': require.resolve('ajv/dist/2020') },
    dialectKeys: SCHEMA_DIALECT_KEYS,
    acceptedDialects: ACCEPTED_DIALECTS_TEXT,
    re2Path: require.resolve('re2js'),
    maxPatternProgram: MAX_PATTERN_PROGRAM,
    cacheSize: WORKER_CACHE_SIZE,
    maxListedErrors: MAX_LISTED_ERRORS,
  };
}

let local: SchemaEngine | undefined;

/**
 * The same compiler and checker on the calling thread, for schemas operators write (the
 * control plane's evaluations): never for a schema from a tenant's request.
 */
export function localSchemaEngine(): SchemaEngine {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- the worker's loader, by the same absolute paths
  local ??= schemaEngine((id) => require(id) as unknown, workerData());
  return local;
}

interface Pending {
  job: Job;
  tenant: string;
  timeoutMs: number;
  resolve(result: SchemaCompileResult | SchemaCheckResult): void;
}

/**
 * Creates a schema worker (the thread starts with the first job, and never keeps the process
 * alive on its own). Time limits and the per-tenant cap: see {@link SchemaWorkerOptions}.
 *
 * Jobs wait in one queue per tenant and the worker serves the tenants with waiting jobs in
 * turn (round-robin), one job at a time: a job of a tenant waits for at most one job of each
 * other tenant with jobs waiting (plus the one running), however many that tenant queued.
 */
export function createSchemaWorker(options: SchemaWorkerOptions = {}): SchemaWorker {
  const compileTimeoutMs = options.compileTimeoutMs ?? DEFAULT_COMPILE_TIMEOUT_MS;
  const checkTimeoutMs = options.checkTimeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
  const maxQueuedPerTenant = options.maxQueuedPerTenant ?? DEFAULT_MAX_QUEUED_PER_TENANT;
  const data: WorkerData = { ...workerData(), ...(options.compileDelayMs ? { compileDelayMs: options.compileDelayMs } : {}) };
  let worker: Worker | undefined;
  /** The job the worker runs now. */
  let running: Pending | undefined;
  /** Jobs waiting, per tenant; the Map's order is the round-robin order (a served tenant moves to the end). */
  const waiting = new Map<string, Pending[]>();
  /** Jobs waiting or running, per tenant (the cap counts both). */
  const held = new Map<string, number>();
  /** The tenant whose job started last. */
  let lastTenant: string | undefined;
  let timer: NodeJS.Timeout | undefined;
  let nextId = 1;
  let closed = false;

  const release = (p: Pending) => {
    const n = (held.get(p.tenant) ?? 1) - 1;
    if (n <= 0) held.delete(p.tenant);
    else held.set(p.tenant, n);
  };
  const finish = (p: Pending, result: SchemaCompileResult | SchemaCheckResult) => {
    release(p);
    p.resolve(result);
  };
  /** Starts the next tenant's next job when the worker is idle. */
  const pump = () => {
    if (running || closed) return;
    let next = waiting.entries().next();
    if (next.done) return;
    // The tenant served last goes behind the others waiting (its queue may have formed while its job ran).
    if (next.value[0] === lastTenant && waiting.size > 1) {
      waiting.delete(lastTenant);
      waiting.set(lastTenant, next.value[1]);
      next = waiting.entries().next();
    }
    if (next.done) return;
    const [tenant, jobs] = next.value;
    lastTenant = tenant;
    const p = jobs.shift() as Pending;
    waiting.delete(tenant);
    if (jobs.length > 0) waiting.set(tenant, jobs);
    running = p;
    worker ??= start();
    worker.postMessage(p.job);
    timer = setTimeout(() => {
      timer = undefined;
      const what = p.job.op === 'compile' ? 'compiling the schema' : 'checking the output against its schema';
      restart(`${what} took longer than ${p.timeoutMs} ms`);
    }, p.timeoutMs);
  };
  const start = (): Worker => {
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: data });
    w.on('message', (reply: { id: number; result: SchemaCompileResult | SchemaCheckResult }) => {
      if (w !== worker || running?.job.id !== reply.id) return;
      clearTimeout(timer);
      timer = undefined;
      const done = running;
      running = undefined;
      finish(done, reply.result);
      pump();
    });
    // A crash (out of memory, a stack overflow outside a try) fails the job it ran, never the rest.
    w.on('error', (err) => {
      if (w === worker) restart(`the schema worker failed (${err.message})`);
    });
    w.on('exit', () => {
      if (w === worker && running) restart('the schema worker stopped');
    });
    // After the listeners (adding a 'message' listener refs the thread again).
    w.unref();
    return w;
  };
  /** Fails the running job with `message`, replaces the worker and goes on with the jobs waiting. */
  const restart = (message: string) => {
    clearTimeout(timer);
    timer = undefined;
    const old = worker;
    worker = undefined;
    if (old) void old.terminate().catch(() => undefined);
    const failed = running;
    running = undefined;
    if (failed) finish(failed, { ok: false, message });
    pump();
  };
  const submit = (job: Job, tenant: string, timeoutMs: number, capped: boolean) =>
    new Promise<SchemaCompileResult | SchemaCheckResult>((resolve) => {
      if (closed) return resolve({ ok: false, message: 'the schema worker is closed' });
      const count = held.get(tenant) ?? 0;
      if (capped && count >= maxQueuedPerTenant) return resolve({ ok: false, busy: true, message: `${count} schema jobs of this tenant are already waiting or running` });
      held.set(tenant, count + 1);
      const pending: Pending = { job, tenant, timeoutMs, resolve };
      const jobs = waiting.get(tenant);
      if (jobs) jobs.push(pending);
      else waiting.set(tenant, [pending]);
      pump();
    });
  return {
    compile: (key, paramName, tenant = '', compileOptions) =>
      submit({ id: nextId++, op: 'compile', key, paramName }, tenant, compileTimeoutMs, compileOptions?.capped !== false) as Promise<SchemaCompileResult>,
    check: (key, text, tenant = '') => submit({ id: nextId++, op: 'check', key, text }, tenant, checkTimeoutMs, false) as Promise<SchemaCheckResult>,
    async close() {
      closed = true;
      clearTimeout(timer);
      timer = undefined;
      const all = [...(running ? [running] : []), ...[...waiting.values()].flat()];
      running = undefined;
      waiting.clear();
      held.clear();
      for (const p of all) p.resolve({ ok: false, message: 'the schema worker is closed' });
      const w = worker;
      worker = undefined;
      if (w) await w.terminate();
    },
  };
}

let shared: SchemaWorker | undefined;

/** The process's schema worker (created on first use with the default time limits). */
export function schemaWorker(): SchemaWorker {
  shared ??= createSchemaWorker();
  return shared;
}
