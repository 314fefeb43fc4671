/**
 * Running a fixed set of parameterized statements as one transaction, as cheaply as the database
 * allows. On a Postgres server that is an ordinary transaction through the pool. On PGlite it is
 * one call into the embedded database: every statement is prepared once per session (named) and
 * the whole transaction — Bind + Execute of each statement, then one Sync — travels as one
 * wire-protocol message buffer. Through the `pg` driver each statement is five separate calls
 * into PGlite (parse, bind, describe, execute, sync, each also awaiting PGlite's file-system
 * sync): measured on this machine (`tools/bench/settlement-journal.ts`), a transaction of four
 * small statements costs ~2.6 ms of CPU that way and ~0.2–0.3 ms pipelined.
 */
import { CompiledQuery, type Kysely } from 'kysely';
import type { WeirSchema } from './schema';

/**
 * One statement of a {@link StatementRunner} transaction. `text` is static SQL with `$1…$n`
 * parameters (so it can be prepared once per session under `name`); `values` are its
 * parameters in text form (`null` for SQL NULL). A name always stands for the same text.
 */
export interface Statement {
  name: string;
  text: string;
  values: readonly (string | null)[];
}

/** The rows a statement returned, every value as text (`null` for SQL NULL); cast in SQL as needed. */
export interface StatementResult {
  rows: Record<string, string | null>[];
}

/**
 * Runs statements in order as one transaction: all of them commit, or — on the first error —
 * none does and the error is thrown (the driver's error, with the SQLSTATE in `code`).
 */
export interface StatementRunner {
  run(statements: readonly Statement[]): Promise<StatementResult[]>;
}

/**
 * The runner of a database opened by `openDatabase`: PGlite's pipelined runner when
 * `openDatabase` registered one for this kysely instance, else an ordinary kysely transaction.
 */
export function statementRunnerFor(db: Kysely<WeirSchema>): StatementRunner {
  return pipelined.get(db) ?? createKyselyStatementRunner(db);
}

const pipelined = new WeakMap<Kysely<WeirSchema>, StatementRunner>();

/** Makes {@link statementRunnerFor} return `runner` for `db` (called by `openDatabase` for PGlite). */
export function registerStatementRunner(db: Kysely<WeirSchema>, runner: StatementRunner): void {
  pipelined.set(db, runner);
}

/**
 * A runner over kysely: one transaction (`BEGIN`, each statement, `COMMIT`). Values are bound as
 * text; result values are converted to text (`pg` parses `int`, `bool` and `json` columns).
 */
export function createKyselyStatementRunner(db: Kysely<WeirSchema>): StatementRunner {
  return { run: (statements) => db.transaction().execute((trx) => executeStatements(trx, statements)) };
}

/**
 * Runs statements one by one on `db` — inside the caller's transaction when `db` is one — and
 * returns their rows as text. Throws the driver's error of the first that fails.
 */
export async function executeStatements(db: Kysely<WeirSchema>, statements: readonly Statement[]): Promise<StatementResult[]> {
  const results: StatementResult[] = [];
  for (const s of statements) {
    const { rows } = await db.executeQuery<Record<string, unknown>>(CompiledQuery.raw(s.text, [...s.values]));
    results.push({ rows: rows.map(asText) });
  }
  return results;
}

function asText(row: Record<string, unknown>): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const k of Object.keys(row)) {
    const v = row[k];
    out[k] = v === null || v === undefined ? null : typeof v === 'object' ? JSON.stringify(v) : String(v);
  }
  return out;
}

/** What the pipelined runner uses of an open PGlite instance. */
export interface PgliteHandle {
  execProtocol(message: Uint8Array, options?: { throwOnError?: boolean }): Promise<{ messages: readonly unknown[] }>;
}

/** The parts of `@electric-sql/pglite` the pipelined runner uses (loaded lazily by `openDatabase`). */
export interface PgliteModule {
  protocol: { serialize: PgliteSerialize };
}

interface PgliteSerialize {
  parse(opts: { name?: string; text: string }): Uint8Array;
  describe(opts: { type: 'S' | 'P'; name?: string }): Uint8Array;
  close(opts: { type: 'S' | 'P'; name?: string }): Uint8Array;
  sync(): Uint8Array;
}

/** A backend message as PGlite's parser gives it (only what the runner reads). */
interface BackendMessage {
  name: string;
  fields?: unknown[];
}

/** A prepared statement of this session: its text (to catch a name reused for other SQL), result columns and runs. */
interface Prepared {
  text: string;
  columns: string[];
  runs: number;
}

/** Options of {@link createPgliteStatementRunner}. */
export interface PgliteStatementRunnerOptions {
  /** Runs of a prepared statement after which it is prepared again. Default 10,000 (see {@link REPREPARE_AFTER_RUNS}). */
  reprepareAfterRuns?: number;
}

/**
 * Runs of a prepared statement after which it is prepared again. After five runs Postgres may
 * keep one generic plan for good, costed on the table sizes of that moment; PGlite never runs
 * ANALYZE, so a plan made on a young database would otherwise outlive the sizes it assumed. (The
 * settlement statements' generic plans probe the growing tables by index anyway — checked with
 * `EXPLAIN EXECUTE` — and scan only `admission_leases`, which holds live leases only.)
 */
const REPREPARE_AFTER_RUNS = 10_000;

/**
 * The pipelined runner over an open PGlite (see the module comment). `db` is the kysely instance
 * over the same PGlite through a one-connection `pg` pool: a run holds that connection
 * (`db.connection()`), so no kysely query or transaction can interleave with it.
 *
 * Atomicity is the extended protocol's: statements between two Syncs that contain no explicit
 * `BEGIN` run in one implicit transaction, and an error makes the backend skip every message up
 * to the Sync, which rolls the transaction back. Statements must therefore not contain
 * transaction control of their own.
 */
export function createPgliteStatementRunner(db: Kysely<WeirSchema>, pglite: PgliteHandle, module: PgliteModule, options: PgliteStatementRunnerOptions = {}): StatementRunner {
  const wire = module.protocol.serialize;
  const reprepareAfterRuns = options.reprepareAfterRuns ?? REPREPARE_AFTER_RUNS;
  const prepared = new Map<string, Prepared>();

  async function call(message: Uint8Array): Promise<readonly BackendMessage[]> {
    const { messages } = await pglite.execProtocol(message, { throwOnError: false });
    return messages as readonly BackendMessage[];
  }

  async function prepare(s: Statement): Promise<Prepared> {
    const known = prepared.get(s.name);
    if (known && known.text !== s.text) throw new Error(`statement ${s.name} was prepared with other SQL`);
    if (known && known.runs < reprepareAfterRuns) return known;
    const parts = [wire.parse({ name: s.name, text: s.text }), wire.describe({ type: 'S', name: s.name }), wire.sync()];
    if (known) parts.unshift(wire.close({ type: 'S', name: s.name }));
    prepared.delete(s.name);
    const messages = await call(concat(parts));
    throwIfError(messages);
    const description = messages.find((m) => m.name === 'rowDescription') as { fields?: { name: string }[] } | undefined;
    const p: Prepared = { text: s.text, columns: (description?.fields ?? []).map((f) => f.name), runs: 0 };
    prepared.set(s.name, p);
    return p;
  }

  return {
    run: (statements) =>
      db.connection().execute(async () => {
        const plans: Prepared[] = [];
        for (const s of statements) plans.push(await prepare(s));
        for (const p of plans) p.runs++;
        const messages = await call(encodePipeline(statements));
        const error = messages.find((m) => m.name === 'error') as { code?: string } | undefined;
        if (error) {
          // A statement this session no longer knows (DEALLOCATE by someone else): prepare all again next time.
          if (error.code === '26000') prepared.clear();
          throw error;
        }
        // Per statement: BindComplete, DataRow…, CommandComplete (no Describe: columns are known).
        const results: StatementResult[] = [];
        let current: StatementResult | undefined;
        for (const m of messages) {
          if (m.name === 'bindComplete') {
            current = { rows: [] };
            results.push(current);
          } else if (m.name === 'dataRow' && current) {
            const columns = plans[results.length - 1].columns;
            const row: Record<string, string | null> = {};
            (m.fields ?? []).forEach((v, i) => (row[columns[i]] = v as string | null));
            current.rows.push(row);
          }
        }
        if (results.length !== statements.length) throw new Error(`pipelined transaction: ${results.length} of ${statements.length} statements answered`);
        return results;
      }),
  };
}

/**
 * Bind (text parameters, text results) and Execute of each prepared statement, then one Sync,
 * as one buffer (PostgreSQL frontend/backend protocol v3, "Extended Query"). Encoded here rather
 * than with PGlite's serializer, which measures each parameter's UTF-8 length in a JavaScript
 * loop, twice: for a batch's rows that was ~7 % of the applier's CPU.
 */
function encodePipeline(statements: readonly Statement[]): Uint8Array {
  let size = 5; // Sync
  const lengths: number[][] = [];
  for (const s of statements) {
    const ls = s.values.map((v) => (v === null ? -1 : Buffer.byteLength(v)));
    lengths.push(ls);
    // Bind: type, length, portal "", name, 0 format codes, n, (length, bytes)…, 0 result formats.
    size += 1 + 4 + 1 + Buffer.byteLength(s.name) + 1 + 2 + 2 + ls.reduce((a, l) => a + 4 + Math.max(l, 0), 0) + 2;
    // Execute: type, length, portal "", max rows 0.
    size += 1 + 4 + 1 + 4;
  }
  const buf = Buffer.allocUnsafe(size);
  let o = 0;
  statements.forEach((s, k) => {
    const start = o;
    buf[o++] = 0x42; // 'B'
    o += 4; // length, below
    buf[o++] = 0; // unnamed portal
    o += buf.write(s.name, o, 'utf8');
    buf[o++] = 0;
    o = buf.writeInt16BE(0, o);
    o = buf.writeInt16BE(s.values.length, o);
    s.values.forEach((v, i) => {
      o = buf.writeInt32BE(lengths[k][i], o);
      if (v !== null) o += buf.write(v, o, 'utf8');
    });
    o = buf.writeInt16BE(0, o);
    buf.writeInt32BE(o - start - 1, start + 1);
    buf[o++] = 0x45; // 'E'
    o = buf.writeInt32BE(9, o);
    buf[o++] = 0;
    o = buf.writeInt32BE(0, o);
  });
  buf[o++] = 0x53; // 'S'
  buf.writeInt32BE(4, o);
  return buf;
}

function throwIfError(messages: readonly BackendMessage[]): void {
  const error = messages.find((m) => m.name === 'error');
  if (error) throw error;
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
