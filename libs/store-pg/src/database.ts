import { readdirSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { Kysely, PostgresDialect } from 'kysely';
import { Pool } from 'pg';
import type { StoreLogger } from './logger';
import { migrateToLatest } from './migrate';
import type { WeirSchema } from './schema';
import { initPgliteDataDir } from './pglite-init';
import { ensurePrivateDir, privatizeTree, restrictUmask } from './private-data-dir';
import { createPgliteStatementRunner, registerStatementRunner } from './statement-runner';

/** Options for {@link openDatabase}. */
export interface OpenDatabaseOptions {
  /**
   * A Postgres connection URL (`postgres://user@host:5432/db`). When set, Weir talks to that
   * server through a `pg` pool and `dataDir` is ignored.
   */
  databaseUrl?: string;
  /**
   * PGlite (embedded Postgres) data directory, created on first use. Used only when
   * `databaseUrl` is unset. Undefined means an in-memory database that vanishes on close.
   */
  dataDir?: string;
  /** Receives open, migration and pool-error events. Default: silent. */
  logger?: StoreLogger;
  /** Size of the `pg` pool (Postgres only; PGlite is single-connection). Default 10. */
  maxConnections?: number;
  /** Run pending migrations on open. Default true. */
  migrate?: boolean;
}

/** An open database: a typed kysely handle plus what it runs on. */
export interface WeirDatabase {
  db: Kysely<WeirSchema>;
  /** `pglite` for the embedded database, `postgres` for a server reached by URL. */
  kind: 'pglite' | 'postgres';
  /** Ends the pool (and shuts PGlite down, flushing its data directory). Idempotent. */
  close(): Promise<void>;
}

/**
 * Opens Weir's database and brings its schema up to date.
 *
 * - `databaseUrl` set: a `pg` pool of `maxConnections` to that Postgres server.
 * - otherwise: PGlite, persisted in `dataDir`, or in memory when `dataDir` is undefined.
 *   PGlite is loaded lazily (it is ESM and several MB of WASM), so processes that use a
 *   Postgres server never load it. Statements run through `statementRunnerFor(db)` (the
 *   settlement applier's) are pipelined into PGlite in one call per transaction. It boots in
 *   ~3–5 s in memory and in under 1 s when reopening an existing data directory. PGlite serves one connection: its pool has `max: 1`,
 *   so queries (and transactions) run one at a time.
 *
 * Migrations run on open unless `migrate: false`.
 *
 * A PGlite `dataDir` is private to the service user: the process umask is tightened to clear
 * group and other bits (process-wide, for the files PGlite creates later), the directory is
 * 0700 and every file in it loses its group and other bits, before and after opening.
 *
 * @throws the driver's error when the server is unreachable or PGlite cannot open `dataDir`
 *   (e.g. another process holds it); WeirError `internal` when a migration fails. Nothing is
 *   left open when it throws.
 */
export async function openDatabase(options: OpenDatabaseOptions = {}): Promise<WeirDatabase> {
  const { logger } = options;
  const opened = options.databaseUrl ? openPostgres(options.databaseUrl, options) : await openPglite(options.dataDir);
  try {
    if (options.migrate ?? true) await migrateToLatest(opened.db as Kysely<unknown>, logger);
  } catch (err) {
    await opened.close();
    throw err;
  }
  logger?.info({ kind: opened.kind, persistent: opened.kind === 'postgres' || options.dataDir !== undefined }, 'database open');
  return opened;
}

function openPostgres(url: string, options: OpenDatabaseOptions): WeirDatabase {
  const pool = new Pool({ connectionString: url, max: options.maxConnections ?? 10 });
  // Without a listener an idle client's error (server restart) would crash the process.
  pool.on('error', (err) => options.logger?.warn({ err }, 'idle postgres connection failed'));
  // The pool listens only to idle clients: a client checked out (by a kysely query or
  // transaction) whose connection is cut (pg_terminate_backend, a server restart) emits
  // 'error' with no listener, which would crash the process. Its query rejects anyway, and
  // the pool drops the broken client on release; here the event is only logged.
  pool.on('connect', (client) => {
    client.on('error', (err) => options.logger?.warn({ err }, 'postgres connection failed while in use'));
  });
  const db = new Kysely<WeirSchema>({ dialect: new PostgresDialect({ pool }) });
  return { db, kind: 'postgres', close: once(() => db.destroy()) };
}

/**
 * Postgres settings of the embedded database, added to PGlite's own start parameters.
 *
 * PGlite's defaults are a server's: `shared_buffers` 128 MB (16,384 pages of 8 kB) and
 * `max_connections` 100 size Postgres's shared memory at 145 MB, all of it inside the WASM
 * memory, and most of it touched (resident) at start. Weir's embedded database is small and
 * served by one connection: 16 MB of buffers (its files stay in the OS page cache beneath)
 * and 8 connection slots make it 21 MB, which cut an idle all-in-one's resident memory by
 * ~120 MB (measured with `tools/bench/idle-memory.ts`; PGlite 0.5.17, Postgres 18.7).
 * `wal_buffers` follows `shared_buffers` (1/32: 512 kB).
 */
const PGLITE_SETTINGS = ['shared_buffers=16MB', 'max_connections=8'];

async function openPglite(dataDir: string | undefined): Promise<WeirDatabase> {
  // A new data directory is initialized by a child process (initdb's native memory leaves with
  // it; see pglite-init.ts). Should that fail, PGlite runs initdb here as before.
  if (dataDir !== undefined) {
    // Owner-only whatever the umask (issue 14, part 6): PGlite creates files for its whole
    // life (WAL segments, relations), so the process umask is tightened first, and whatever an
    // earlier, looser start left is fixed.
    restrictUmask();
    ensurePrivateDir(dataDir);
    privatizeTree(dataDir);
    await initPgliteDataDir(dataDir).catch((err: unknown) => {
      if (!isEmptyDir(dataDir)) throw err; // a half-made directory: say why, do not build on it
    });
  }
  // `import()` survives the CommonJS build (TS nodenext keeps it; swc has ignoreDynamic) and
  // loads PGlite's ESM entry; only this code path pays for it. Sequential on purpose: jest's
  // ESM loader fails ("request for './chunk-….js' is not in cache") when two concurrent
  // imports share a chunk.
  const { PGlite, protocol } = await import('@electric-sql/pglite');
  const { createPgConfig } = await import('@electric-sql/pglite/node-postgres');
  // PGlite's Postgres (9 MB of WASM) is compiled by V8's baseline compiler only (Liftoff): V8
  // captures the flag when it compiles a module (here, before waitReady resolves; on a new data
  // directory also PGlite's initdb instance), so WASM compiled later (undici's HTTP parser, on
  // the request path) still tiers up. TurboFan's compilations of PGlite's hot functions left
  // 50–110 MB of native memory in glibc's arenas of an all-in-one, idle or under load; Liftoff's
  // code costs ~10 % more CPU per statement (tools/bench/idle-memory.ts; issue 13 item 7). A flag
  // given on the command line is left alone; an unknown flag would be ignored.
  const liftoffOnly = !process.execArgv.some((a) => a.includes('liftoff-only'));
  if (liftoffOnly) setFlagsFromString('--liftoff-only');
  const pglite = new PGlite(dataDir, { startParams: [...PGlite.defaultStartParams, ...PGLITE_SETTINGS.flatMap((s) => ['-c', s])] });
  try {
    await pglite.waitReady;
  } catch (err) {
    await pglite.close().catch(() => undefined);
    throw err;
  } finally {
    if (liftoffOnly) setFlagsFromString('--no-liftoff-only');
  }
  // initdb (in a child, or here as a fallback) chose its own modes.
  if (dataDir !== undefined) privatizeTree(dataDir);
  // createPgConfig gives `pg` a connection object that speaks to this PGlite instance; one
  // connection only, so the pool must never open a second client.
  // idleTimeoutMillis 0: keep the one in-process connection instead of re-running the
  // startup handshake after every idle spell (there is no socket to reclaim).
  const pool = new Pool({ ...createPgConfig(pglite), max: 1, idleTimeoutMillis: 0 });
  const db = new Kysely<WeirSchema>({ dialect: new PostgresDialect({ pool }) });
  // Hot transactions (the settlement applier's) bypass `pg` and go to PGlite in one call.
  registerStatementRunner(db, createPgliteStatementRunner(db, pglite, { protocol }));
  return {
    db,
    kind: 'pglite',
    close: once(async () => {
      await db.destroy();
      await pglite.close();
    }),
  };
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () => (done ??= fn());
}

/** Whether `dir` is missing or holds nothing. */
function isEmptyDir(dir: string): boolean {
  try {
    return readdirSync(dir).length === 0;
  } catch {
    return true;
  }
}
