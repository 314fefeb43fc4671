import { randomBytes } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { type BatchFilePurpose, type BatchInputError, type BatchStatus, type BatchStore, type Caller, type FileWriter, newId, type Page, type StoredBatch, type StoredFile } from '@weir/core';
import type { WeirSchema } from './schema';

/** Options of {@link createPgBatchStore}. */
export interface PgBatchStoreOptions {
  /** Bytes per chunk of an output or error file written by `finalizeBatch`. Default 262,144. */
  outputChunkBytes?: number;
  /** Items read per page while finalizing. Default 500. */
  finalizePageSize?: number;
}

type Row = Record<string, unknown>;

const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
const json = <T>(v: unknown): T => (typeof v === 'string' ? (JSON.parse(v) as T) : (v as T));

function toFile(r: Row): StoredFile {
  return {
    id: r.id as string,
    tenantKey: r.tenant_key as string,
    purpose: r.purpose as BatchFilePurpose,
    filename: r.filename as string,
    bytes: num(r.bytes),
    lines: num(r.lines),
    createdAtS: num(r.created_at_s),
  };
}

function toBatch(r: Row): StoredBatch {
  return {
    id: r.id as string,
    tenantKey: r.tenant_key as string,
    caller: json<Caller>(r.caller),
    endpoint: r.endpoint as string,
    inputFileId: r.input_file_id as string,
    completionWindow: r.completion_window as string,
    status: r.status as BatchStatus,
    finalStatus: (r.final_status as StoredBatch['finalStatus']) ?? null,
    outputFileId: (r.output_file_id as string | null) ?? null,
    errorFileId: (r.error_file_id as string | null) ?? null,
    errors: r.errors === null || r.errors === undefined ? null : json<BatchInputError[]>(r.errors),
    metadata: r.metadata === null || r.metadata === undefined ? null : json<Record<string, string>>(r.metadata),
    model: (r.model as string | null) ?? null,
    total: num(r.total),
    completed: num(r.completed),
    failed: num(r.failed),
    usage: { inputTokens: num(r.input_tokens), outputTokens: num(r.output_tokens), cachedTokens: num(r.cached_tokens) },
    paused: r.paused_reason ? { reason: r.paused_reason as string, message: (r.paused_message as string) ?? '', untilMs: num(r.paused_until_ms) } : null,
    createdAtS: num(r.created_at_s),
    inProgressAtS: numOrNull(r.in_progress_at_s),
    expiresAtS: num(r.expires_at_s),
    finalizingAtS: numOrNull(r.finalizing_at_s),
    completedAtS: numOrNull(r.completed_at_s),
    failedAtS: numOrNull(r.failed_at_s),
    expiredAtS: numOrNull(r.expired_at_s),
    cancellingAtS: numOrNull(r.cancelling_at_s),
    cancelledAtS: numOrNull(r.cancelled_at_s),
  };
}

/**
 * The {@link BatchStore} on Postgres or PGlite (migration 0020, docs/batch.md). Files are rows of
 * `bytea` chunks, written and read one chunk at a time. Items are a work queue: `leaseItems`
 * takes runnable rows with `FOR UPDATE SKIP LOCKED` (two runners never take one item), sets a
 * fresh fencing token and a lease expiry; `completeItem` writes the result and bumps the batch's
 * counts in one statement, only while the token still holds, so a runner whose lease expired
 * (and whose item another runner took) cannot write a second result. Rejects with the driver's
 * error when the database fails.
 */
export function createPgBatchStore(db: Kysely<WeirSchema>, options: PgBatchStoreOptions = {}): BatchStore {
  const chunkBytes = options.outputChunkBytes ?? 262_144;
  const pageSize = options.finalizePageSize ?? 500;
  const rows = async (q: ReturnType<typeof sql>, on: Kysely<WeirSchema> = db): Promise<Row[]> => (await q.execute(on)).rows as Row[];

  const createFile = async (tenantKey: string, purpose: BatchFilePurpose, filename: string, on: Kysely<WeirSchema> = db): Promise<FileWriter> => {
    const id = newId('file');
    const createdAtS = Math.floor(Date.now() / 1000);
    await sql`INSERT INTO batch_files (id, tenant_key, purpose, filename, created_at_s) VALUES (${id}, ${tenantKey}, ${purpose}, ${filename}, ${createdAtS})`.execute(on);
    let seq = 0;
    return {
      id,
      async append(chunk) {
        if (chunk.length === 0) return;
        await sql`INSERT INTO batch_file_chunks (file_id, seq, data) VALUES (${id}, ${seq}, ${chunk})`.execute(on);
        seq += 1;
      },
      async commit(bytes, lines) {
        await sql`UPDATE batch_files SET bytes = ${bytes}, lines = ${lines}, committed = true WHERE id = ${id}`.execute(on);
        return { id, tenantKey, purpose, filename, bytes, lines, createdAtS };
      },
      async abort() {
        await sql`DELETE FROM batch_files WHERE id = ${id}`.execute(on);
      },
    };
  };

  /** A cursor page: `limit + 1` rows read to know whether more follow. */
  const page = <T>(found: Row[], limit: number, map: (r: Row) => T): Page<T> => ({ data: found.slice(0, limit).map(map), hasMore: found.length > limit });

  return {
    createFile: (tenantKey, purpose, filename) => createFile(tenantKey, purpose, filename),

    async getFile(tenantKey, id) {
      const [r] = await rows(sql`SELECT * FROM batch_files WHERE id = ${id} AND tenant_key = ${tenantKey} AND committed`);
      return r ? toFile(r) : undefined;
    },

    async listFiles(tenantKey, { after, limit, order, purpose }) {
      const cursor = after
        ? order === 'desc'
          ? sql`AND ord < (SELECT ord FROM batch_files WHERE id = ${after} AND tenant_key = ${tenantKey})`
          : sql`AND ord > (SELECT ord FROM batch_files WHERE id = ${after} AND tenant_key = ${tenantKey})`
        : sql``;
      const byPurpose = purpose ? sql`AND purpose = ${purpose}` : sql``;
      const dir = order === 'desc' ? sql`DESC` : sql`ASC`;
      const found = await rows(sql`SELECT * FROM batch_files WHERE tenant_key = ${tenantKey} AND committed ${byPurpose} ${cursor} ORDER BY ord ${dir} LIMIT ${limit + 1}`);
      return page(found, limit, toFile);
    },

    async *readFile(tenantKey, id) {
      const [f] = await rows(sql`SELECT id FROM batch_files WHERE id = ${id} AND tenant_key = ${tenantKey} AND committed`);
      if (!f) return;
      for (let seq = 0; ; seq++) {
        const [c] = await rows(sql`SELECT data FROM batch_file_chunks WHERE file_id = ${id} AND seq = ${seq}`);
        if (!c) return;
        yield Buffer.from(c.data as Uint8Array);
      }
    },

    async deleteFile(tenantKey, id) {
      const gone = await rows(sql`DELETE FROM batch_files WHERE id = ${id} AND tenant_key = ${tenantKey} AND committed RETURNING id`);
      return gone.length > 0;
    },

    async createBatch(b) {
      const [r] = await rows(sql`INSERT INTO batches (id, tenant_key, caller, endpoint, input_file_id, completion_window, status, metadata, created_at_s, expires_at_s)
        VALUES (${b.id}, ${b.tenantKey}, ${JSON.stringify(b.caller)}, ${b.endpoint}, ${b.inputFileId}, ${b.completionWindow}, 'validating', ${b.metadata ? JSON.stringify(b.metadata) : null}, ${b.createdAtS}, ${b.expiresAtS})
        RETURNING *`);
      return toBatch(r);
    },

    async getBatch(tenantKey, id) {
      const [r] = await rows(sql`SELECT * FROM batches WHERE id = ${id} AND tenant_key = ${tenantKey}`);
      return r ? toBatch(r) : undefined;
    },

    async listBatches(tenantKey, { after, limit }) {
      const cursor = after ? sql`AND ord < (SELECT ord FROM batches WHERE id = ${after} AND tenant_key = ${tenantKey})` : sql``;
      const found = await rows(sql`SELECT * FROM batches WHERE tenant_key = ${tenantKey} ${cursor} ORDER BY ord DESC LIMIT ${limit + 1}`);
      return page(found, limit, toBatch);
    },

    async cancelBatch(tenantKey, id, nowS) {
      const [r] = await rows(sql`UPDATE batches SET
          status = CASE WHEN status = 'validating' THEN 'cancelled' ELSE 'cancelling' END,
          final_status = 'cancelled',
          cancelling_at_s = ${nowS},
          cancelled_at_s = CASE WHEN status = 'validating' THEN ${nowS}::bigint ELSE NULL END
        WHERE id = ${id} AND tenant_key = ${tenantKey} AND status IN ('validating', 'in_progress')
        RETURNING *`);
      if (r) return toBatch(r);
      const [now] = await rows(sql`SELECT * FROM batches WHERE id = ${id} AND tenant_key = ${tenantKey}`);
      return now ? toBatch(now) : undefined;
    },

    async leaseBatch(kind, owner, nowMs, ms) {
      const which =
        kind === 'validate'
          ? sql`status = 'validating'`
          : sql`status IN ('finalizing', 'cancelling') AND NOT EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = b.id AND i.state = 'running' AND i.lease_until_ms >= ${nowMs})`;
      const [r] = await rows(sql`UPDATE batches SET lease_owner = ${owner}, lease_until_ms = ${nowMs + ms}
        WHERE id = (SELECT id FROM batches b WHERE ${which} AND (b.lease_until_ms IS NULL OR b.lease_until_ms < ${nowMs}) ORDER BY ord LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING *`);
      return r ? toBatch(r) : undefined;
    },

    async addItems(batchId, items) {
      if (items.length === 0) return;
      const values = items.map((it) => sql`(${batchId}, ${it.index}, ${it.customId}, ${JSON.stringify(it.body)})`);
      // A validation run again (its runner died, or its lease ran out) writes the same rows again.
      await sql`INSERT INTO batch_items (batch_id, idx, custom_id, body) VALUES ${sql.join(values)}
        ON CONFLICT (batch_id, idx) DO UPDATE SET custom_id = EXCLUDED.custom_id, body = EXCLUDED.body WHERE batch_items.state = 'pending'`.execute(db);
    },

    async finishValidation(batchId, outcome, nowS) {
      await db.transaction().execute(async (trx) => {
        if ('errors' in outcome) {
          await sql`DELETE FROM batch_items WHERE batch_id = ${batchId}`.execute(trx);
          await sql`UPDATE batches SET status = 'failed', failed_at_s = ${nowS}, errors = ${JSON.stringify(outcome.errors)}, lease_owner = NULL, lease_until_ms = NULL WHERE id = ${batchId} AND status = 'validating'`.execute(trx);
          return;
        }
        const moved = await rows(
          sql`UPDATE batches SET status = 'in_progress', in_progress_at_s = ${nowS}, total = ${outcome.total}, model = ${outcome.model}, lease_owner = NULL, lease_until_ms = NULL WHERE id = ${batchId} AND status = 'validating' RETURNING id`,
          trx,
        );
        // Cancelled while it was being validated: its items never run.
        if (moved.length === 0) await sql`DELETE FROM batch_items WHERE batch_id = ${batchId}`.execute(trx);
      });
    },

    async expireDue(nowS) {
      const moved = await rows(sql`UPDATE batches SET status = 'finalizing', final_status = 'expired', finalizing_at_s = ${nowS} WHERE status = 'in_progress' AND expires_at_s <= ${nowS} RETURNING id`);
      const early = await rows(sql`UPDATE batches SET status = 'expired', expired_at_s = ${nowS}, final_status = 'expired' WHERE status = 'validating' AND expires_at_s <= ${nowS} RETURNING id`);
      return moved.length + early.length;
    },

    async leaseItems(owner, n, nowMs, leaseMs) {
      if (n <= 0) return [];
      const token = `${owner}:${randomBytes(8).toString('hex')}`;
      const until = nowMs + leaseMs;
      // Fair between batches: up to `n` candidates of each running batch (oldest 64 batches),
      // taken round-robin (each batch's first, then each one's second, ...).
      const found = await rows(sql`WITH candidates AS (
          SELECT x.batch_id, x.idx, b.ord FROM (
            SELECT id, ord FROM batches WHERE status = 'in_progress' AND (paused_until_ms IS NULL OR paused_until_ms <= ${nowMs}) ORDER BY ord LIMIT 64
          ) b CROSS JOIN LATERAL (
            SELECT i.batch_id, i.idx FROM batch_items i
            WHERE i.batch_id = b.id AND ((i.state = 'pending' AND i.not_before_ms <= ${nowMs}) OR (i.state = 'running' AND i.lease_until_ms < ${nowMs}))
            ORDER BY i.idx LIMIT ${n}
            FOR UPDATE SKIP LOCKED
          ) x),
        picked AS (
          SELECT batch_id, idx FROM (SELECT batch_id, idx, ord, row_number() OVER (PARTITION BY batch_id ORDER BY idx) AS turn FROM candidates) c
          ORDER BY turn, ord LIMIT ${n})
        UPDATE batch_items i SET state = 'running', attempts = i.attempts + 1, lease_owner = ${owner}, lease_token = ${token}, lease_until_ms = ${until}
        FROM picked p WHERE i.batch_id = p.batch_id AND i.idx = p.idx
        RETURNING i.batch_id, i.idx, i.custom_id, i.body, i.attempts, (SELECT row_to_json(x) FROM (SELECT b.caller, b.endpoint, b.paused_reason FROM batches b WHERE b.id = i.batch_id) x) AS batch`);
      return found
        .map((r) => {
          const b = json<{ caller: unknown; endpoint: string; paused_reason: string | null }>(r.batch);
          return {
            batchId: r.batch_id as string,
            index: num(r.idx),
            customId: r.custom_id as string,
            body: json<unknown>(r.body),
            attempts: num(r.attempts),
            caller: json<Caller>(b.caller),
            endpoint: b.endpoint,
            batchPaused: b.paused_reason !== null,
            token,
            leaseUntilMs: until,
          };
        })
        .sort((a, b) => (a.batchId === b.batchId ? a.index - b.index : a.batchId < b.batchId ? -1 : 1));
    },

    async renewItem(item, nowMs, leaseMs) {
      const until = nowMs + leaseMs;
      const r = await rows(sql`UPDATE batch_items SET lease_until_ms = ${until} WHERE batch_id = ${item.batchId} AND idx = ${item.index} AND state = 'running' AND lease_token = ${item.token} RETURNING idx`);
      if (r.length > 0) item.leaseUntilMs = until;
      return r.length > 0;
    },

    async completeItem(item, result) {
      const u = result.usage ?? { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
      const ok = result.ok ? 1 : 0;
      const r = await rows(sql`WITH done AS (
          UPDATE batch_items SET state = 'done', ok = ${result.ok}, result = ${result.line}, lease_owner = NULL, lease_token = NULL, lease_until_ms = NULL
          WHERE batch_id = ${item.batchId} AND idx = ${item.index} AND state = 'running' AND lease_token = ${item.token}
          RETURNING batch_id)
        UPDATE batches b SET completed = b.completed + ${ok}, failed = b.failed + ${1 - ok},
          input_tokens = b.input_tokens + ${u.inputTokens}, output_tokens = b.output_tokens + ${u.outputTokens}, cached_tokens = b.cached_tokens + ${u.cachedTokens},
          status = CASE WHEN b.status = 'in_progress' AND b.completed + b.failed + 1 >= b.total THEN 'finalizing' ELSE b.status END,
          final_status = CASE WHEN b.status = 'in_progress' AND b.completed + b.failed + 1 >= b.total THEN 'completed' ELSE b.final_status END,
          finalizing_at_s = CASE WHEN b.status = 'in_progress' AND b.completed + b.failed + 1 >= b.total THEN ${Math.floor(Date.now() / 1000)}::bigint ELSE b.finalizing_at_s END
        FROM done WHERE b.id = done.batch_id
        RETURNING b.id`);
      return r.length > 0;
    },

    async releaseItem(item, notBeforeMs, countAttempt = false) {
      const r = await rows(sql`UPDATE batch_items SET state = 'pending', attempts = ${countAttempt ? sql`attempts` : sql`GREATEST(attempts - 1, 0)`}, not_before_ms = ${notBeforeMs}, lease_owner = NULL, lease_token = NULL, lease_until_ms = NULL
        WHERE batch_id = ${item.batchId} AND idx = ${item.index} AND state = 'running' AND lease_token = ${item.token} RETURNING idx`);
      return r.length > 0;
    },

    async pauseBatch(batchId, paused) {
      await sql`UPDATE batches SET paused_reason = ${paused?.reason ?? null}, paused_message = ${paused?.message ?? null}, paused_until_ms = ${paused?.untilMs ?? null} WHERE id = ${batchId}`.execute(db);
    },

    async finalizeBatch(batchId, owner, unfinished, nowS) {
      return db.transaction().execute(async (trx) => {
        const [b] = await rows(sql`SELECT * FROM batches WHERE id = ${batchId} AND lease_owner = ${owner} AND status IN ('finalizing', 'cancelling') FOR UPDATE`, trx);
        if (!b) return undefined;
        const batch = toBatch(b);
        const final = batch.finalStatus ?? 'completed';
        // Fence: an item still queued or held by a dead runner gets no result from anyone now.
        const abandoned = await rows(sql`UPDATE batch_items SET state = 'abandoned', lease_token = NULL WHERE batch_id = ${batchId} AND state IN ('pending', 'running') RETURNING idx`, trx);
        const out = await createFile(batch.tenantKey, 'batch_output', `${batchId}_output.jsonl`, trx);
        const err = await createFile(batch.tenantKey, 'batch_output', `${batchId}_error.jsonl`, trx);
        const sinks = [
          { w: out, parts: [] as Buffer[], size: 0, bytes: 0, lines: 0 },
          { w: err, parts: [] as Buffer[], size: 0, bytes: 0, lines: 0 },
        ];
        const flush = async (s: (typeof sinks)[number]) => {
          if (s.size === 0) return;
          await s.w.append(Buffer.concat(s.parts));
          s.parts = [];
          s.size = 0;
        };
        for (let last = -1; ; ) {
          const items = await rows(sql`SELECT idx, custom_id, state, ok, result FROM batch_items WHERE batch_id = ${batchId} AND idx > ${last} ORDER BY idx LIMIT ${pageSize}`, trx);
          if (items.length === 0) break;
          for (const it of items) {
            const index = num(it.idx);
            last = index;
            const done = it.state === 'done';
            const line = done ? (it.result as string) : unfinished(it.custom_id as string, index, final);
            const s = sinks[done && it.ok ? 0 : 1];
            const buf = Buffer.from(`${line}\n`, 'utf8');
            s.parts.push(buf);
            s.size += buf.length;
            s.bytes += buf.length;
            s.lines += 1;
            if (s.size >= chunkBytes) await flush(s);
          }
        }
        const ids: (string | null)[] = [];
        for (const s of sinks) {
          await flush(s);
          if (s.lines === 0) {
            await s.w.abort();
            ids.push(null);
          } else {
            await s.w.commit(s.bytes, s.lines);
            ids.push(s.w.id);
          }
        }
        const at = final === 'completed' ? sql`completed_at_s = ${nowS}` : final === 'expired' ? sql`expired_at_s = ${nowS}` : sql`cancelled_at_s = ${nowS}`;
        const [after] = await rows(
          sql`UPDATE batches SET status = ${final}, ${at}, output_file_id = ${ids[0]}, error_file_id = ${ids[1]}, failed = failed + ${abandoned.length}, paused_reason = NULL, paused_message = NULL, paused_until_ms = NULL, lease_owner = NULL, lease_until_ms = NULL
            WHERE id = ${batchId} RETURNING *`,
          trx,
        );
        return toBatch(after);
      });
    },
  };
}
