/**
 * OpenAI's Files and Batch routes (docs/batch.md): `POST/GET /v1/files`, `GET/DELETE
 * /v1/files/{id}`, `GET /v1/files/{id}/content`, `POST/GET /v1/batches`, `GET /v1/batches/{id}`,
 * `POST /v1/batches/{id}/cancel`. Everything is the caller's tenant's (`tenantKeyOf`): another
 * tenant's id is a 404. Uploads stream into the store in chunks; downloads stream out of it.
 */
import type { ServerResponse } from 'node:http';
import { type BatchStore, type Caller, newId, type StoredBatch, type StoredFile, tenantKeyOf, WeirError } from '@weir/core';
import { type AuthedRequest, sendJson } from '../edge';
import { BATCH_ENDPOINTS, type BatchLimits } from './validate';
import { multipartBoundary, type PartSink, readMultipart } from './multipart';

/** What {@link registerBatchRoutes} needs of the app. */
export interface BatchRoutesHost {
  /** Adds a route (`body: false`: the handler reads the request itself; `body: true`: the JSON body is parsed first). */
  route(method: 'GET' | 'POST' | 'DELETE', pattern: string, run: (req: AuthedRequest, res: ServerResponse) => Promise<void>, body: boolean): void;
  /** Throws while the gateway drains or is not ready (new work is refused). */
  refuseWhileDraining(): void;
}

/** The batch API's dependencies. */
export interface BatchApi {
  store: BatchStore;
  /** File limits (bytes and lines); see `DEFAULT_BATCH_LIMITS`. */
  limits: BatchLimits;
  /** Called when a batch was created or cancelled (wakes the runner). */
  onChange?: () => void;
}

/** Bytes buffered before a chunk is stored. */
const UPLOAD_CHUNK_BYTES = 256 * 1024;
/** `completion_window`: OpenAI accepts only `24h`. */
const WINDOWS: Readonly<Record<string, number>> = { '24h': 86_400 };

/** OpenAI's `FileObject`. */
export function fileObject(f: StoredFile) {
  return { id: f.id, object: 'file', bytes: f.bytes, created_at: f.createdAtS, filename: f.filename, purpose: f.purpose, status: 'processed', expires_at: null, status_details: null };
}

/** OpenAI's `Batch`, plus `weir` (pause reason, progress: rate in requests/s and ETA in s while running). */
export function batchObject(b: StoredBatch, nowS: number = Math.floor(Date.now() / 1000)) {
  const done = b.completed + b.failed;
  const elapsed = b.inProgressAtS !== null ? Math.max(1, nowS - b.inProgressAtS) : 0;
  const rate = b.status === 'in_progress' && done > 0 && elapsed > 0 ? done / elapsed : null;
  return {
    id: b.id,
    object: 'batch',
    endpoint: b.endpoint,
    model: b.model,
    errors: b.errors ? { object: 'list', data: b.errors } : null,
    input_file_id: b.inputFileId,
    completion_window: b.completionWindow,
    status: b.status,
    output_file_id: b.outputFileId,
    error_file_id: b.errorFileId,
    created_at: b.createdAtS,
    in_progress_at: b.inProgressAtS,
    expires_at: b.expiresAtS,
    finalizing_at: b.finalizingAtS,
    completed_at: b.completedAtS,
    failed_at: b.failedAtS,
    expired_at: b.expiredAtS,
    cancelling_at: b.cancellingAtS,
    cancelled_at: b.cancelledAtS,
    request_counts: { total: b.total, completed: b.completed, failed: b.failed },
    usage: {
      input_tokens: b.usage.inputTokens,
      input_tokens_details: { cached_tokens: b.usage.cachedTokens },
      output_tokens: b.usage.outputTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: b.usage.inputTokens + b.usage.outputTokens,
    },
    metadata: b.metadata,
    weir: {
      paused: b.paused && b.status === 'in_progress' ? { reason: b.paused.reason, message: b.paused.message, until: Math.ceil(b.paused.untilMs / 1000) } : null,
      rate_per_s: rate,
      eta_s: rate ? Math.ceil((b.total - done) / rate) : null,
    },
  };
}

/** A cursor page as OpenAI lists it. */
function listOf<T extends { id: string }>(data: T[], hasMore: boolean) {
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: hasMore };
}

/** `limit` of a list: 1..max, default `dflt`. */
function limitOf(q: Record<string, string | string[] | undefined>, dflt: number, max: number): number {
  const v = q.limit;
  if (v === undefined) return dflt;
  const n = typeof v === 'string' && /^\d{1,6}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= max)) throw new WeirError('invalid_request', `\`limit\` must be a whole number from 1 to ${max}.`, { param: 'limit' });
  return n;
}

function stringParam(q: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = q[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || v.length === 0 || v.length > 256) throw new WeirError('invalid_request', `\`${name}\` must be given once, as a non-empty string.`, { param: name });
  return v;
}

const noFile = (id: string) => new WeirError('not_found', `No such file: '${id}'.`, { param: 'file_id' });
const noBatch = (id: string) => new WeirError('not_found', `No such batch: '${id}'.`, { param: 'batch_id' });

/** Registers the Files and Batch routes on the app. */
export function registerBatchRoutes(host: BatchRoutesHost, api: BatchApi): void {
  const { store, limits } = api;
  const tenant = (caller: Caller) => tenantKeyOf(caller);

  host.route(
    'POST',
    '/v1/files',
    async (req, res) => {
      host.refuseWhileDraining();
      const boundary = multipartBoundary(req.header('content-type'));
      const declared = Number.parseInt(req.header('content-length') ?? '', 10);
      // A declared size past the limit (plus room for the form's other parts) is refused unread.
      if (declared > limits.maxFileBytes + 64 * 1024) {
        req.raw.resume();
        throw tooLarge(limits.maxFileBytes);
      }
      const t = tenant(req.caller);
      let purpose: string | undefined;
      let stored: StoredFile | undefined;
      let upload: Upload | undefined;
      try {
        await readMultipart(req.raw, boundary, (part) => {
          if (part.name === 'file' && part.filename !== undefined) {
            if (upload) throw new WeirError('invalid_request', 'Send one `file` per upload.', { param: 'file' });
            upload = new Upload(store, t, part.filename, limits);
            return upload;
          }
          return fieldSink((value) => {
            if (part.name === 'purpose') purpose = value;
          });
        });
        if (purpose !== 'batch') throw new WeirError('invalid_request', `\`purpose\` must be "batch"${purpose === undefined ? ' (it is missing)' : `, not "${purpose.slice(0, 40)}"`}: Weir stores files for the Batch API only.`, { param: 'purpose' });
        if (!upload) throw new WeirError('invalid_request', 'The upload has no `file` part.', { param: 'file' });
        stored = await upload.commit();
      } catch (err) {
        await upload?.abort();
        if (!req.raw.readableEnded) req.raw.resume();
        throw err;
      }
      sendJson(res, 200, fileObject(stored));
    },
    false,
  );

  host.route(
    'GET',
    '/v1/files',
    async (req, res) => {
      const q = req.query();
      const order = stringParam(q, 'order') ?? 'desc';
      if (order !== 'asc' && order !== 'desc') throw new WeirError('invalid_request', '`order` must be "asc" or "desc".', { param: 'order' });
      const after = stringParam(q, 'after');
      const purpose = stringParam(q, 'purpose');
      const page = await store.listFiles(tenant(req.caller), { limit: limitOf(q, 10_000, 10_000), order, ...(after ? { after } : {}), ...(purpose ? { purpose } : {}) });
      sendJson(res, 200, listOf(page.data.map(fileObject), page.hasMore));
    },
    false,
  );

  host.route(
    'GET',
    '/v1/files/:id',
    async (req, res) => {
      const f = await store.getFile(tenant(req.caller), req.params.id);
      if (!f) throw noFile(req.params.id);
      sendJson(res, 200, fileObject(f));
    },
    false,
  );

  host.route(
    'DELETE',
    '/v1/files/:id',
    async (req, res) => {
      if (!(await store.deleteFile(tenant(req.caller), req.params.id))) throw noFile(req.params.id);
      sendJson(res, 200, { id: req.params.id, object: 'file', deleted: true });
    },
    false,
  );

  host.route(
    'GET',
    '/v1/files/:id/content',
    async (req, res) => {
      const t = tenant(req.caller);
      const f = await store.getFile(t, req.params.id);
      if (!f) throw noFile(req.params.id);
      res.statusCode = 200;
      res.setHeader('content-type', 'application/octet-stream');
      res.setHeader('content-length', String(f.bytes));
      res.setHeader('content-disposition', `attachment; filename="${f.filename.replace(/["\\\r\n]/g, '_')}"`);
      for await (const chunk of store.readFile(t, f.id)) {
        if (res.destroyed) return;
        if (!res.write(chunk)) await new Promise<void>((r) => res.once('drain', () => r()).once('close', () => r()));
      }
      res.end();
    },
    false,
  );

  host.route(
    'POST',
    '/v1/batches',
    async (req, res) => {
      const body = req.body as Record<string, unknown> | undefined;
      if (!body || typeof body !== 'object' || Array.isArray(body)) throw new WeirError('invalid_request', 'The request body must be a JSON object.');
      const inputFileId = body.input_file_id;
      if (typeof inputFileId !== 'string' || inputFileId.length === 0) throw new WeirError('invalid_request', '`input_file_id` is required: the id of a file uploaded with purpose "batch".', { param: 'input_file_id' });
      const endpoint = body.endpoint;
      if (typeof endpoint !== 'string' || !BATCH_ENDPOINTS.includes(endpoint)) throw new WeirError('invalid_request', `\`endpoint\` must be one of ${BATCH_ENDPOINTS.join(', ')}.`, { param: 'endpoint' });
      const window = body.completion_window;
      if (typeof window !== 'string' || WINDOWS[window] === undefined) throw new WeirError('invalid_request', '`completion_window` must be "24h".', { param: 'completion_window' });
      const metadata = metadataOf(body.metadata);
      for (const name of Object.keys(body)) {
        if (!['input_file_id', 'endpoint', 'completion_window', 'metadata', 'output_expires_after'].includes(name)) throw new WeirError('invalid_request', `Unknown field \`${name}\`.`, { param: name });
      }
      const t = tenant(req.caller);
      const file = await store.getFile(t, inputFileId);
      if (!file) throw new WeirError('not_found', `No such file: '${inputFileId}'.`, { param: 'input_file_id' });
      if (file.purpose !== 'batch') throw new WeirError('invalid_request', `The file '${inputFileId}' has purpose "${file.purpose}"; a batch's input must have purpose "batch".`, { param: 'input_file_id' });
      const nowS = Math.floor(Date.now() / 1000);
      const batch = await store.createBatch({ id: newId('batch'), tenantKey: t, caller: req.caller, endpoint, inputFileId, completionWindow: window, metadata, createdAtS: nowS, expiresAtS: nowS + WINDOWS[window] });
      api.onChange?.();
      sendJson(res, 200, batchObject(batch, nowS));
    },
    true,
  );

  host.route(
    'GET',
    '/v1/batches',
    async (req, res) => {
      const q = req.query();
      const after = stringParam(q, 'after');
      const page = await store.listBatches(tenant(req.caller), { limit: limitOf(q, 20, 100), ...(after ? { after } : {}) });
      sendJson(res, 200, listOf(page.data.map((b) => batchObject(b)), page.hasMore));
    },
    false,
  );

  host.route(
    'GET',
    '/v1/batches/:id',
    async (req, res) => {
      const b = await store.getBatch(tenant(req.caller), req.params.id);
      if (!b) throw noBatch(req.params.id);
      sendJson(res, 200, batchObject(b));
    },
    false,
  );

  host.route(
    'POST',
    '/v1/batches/:id/cancel',
    async (req, res) => {
      req.raw.resume();
      const b = await store.cancelBatch(tenant(req.caller), req.params.id, Math.floor(Date.now() / 1000));
      if (!b) throw noBatch(req.params.id);
      if (b.status !== 'cancelling' && b.status !== 'cancelled') throw new WeirError('conflict', `The batch '${b.id}' is ${b.status}; only a validating or in-progress batch can be cancelled.`, { param: 'batch_id' });
      api.onChange?.();
      sendJson(res, 200, batchObject(b));
    },
    false,
  );
}

function tooLarge(max: number): WeirError {
  return new WeirError('payload_too_large', `The file is larger than ${max} bytes, the limit of a batch input file; split it into several batches.`, { param: 'file' });
}

/** OpenAI's metadata: at most 16 string pairs, keys ≤ 64 and values ≤ 512 characters. */
function metadataOf(v: unknown): Record<string, string> | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) throw new WeirError('invalid_request', '`metadata` must be an object of strings.', { param: 'metadata' });
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > 16) throw new WeirError('invalid_request', '`metadata` has more than 16 keys.', { param: 'metadata' });
  for (const [k, val] of entries) {
    if (k.length > 64 || typeof val !== 'string' || val.length > 512) throw new WeirError('invalid_request', '`metadata` keys must be at most 64 characters and values strings of at most 512.', { param: `metadata.${k.slice(0, 64)}` });
  }
  return Object.fromEntries(entries) as Record<string, string>;
}

/** A small form field, collected (at most 4 KiB). */
function fieldSink(done: (value: string) => void): PartSink {
  const parts: Buffer[] = [];
  let size = 0;
  return {
    write(chunk) {
      size += chunk.length;
      if (size > 4096) throw new WeirError('invalid_request', 'A form field is longer than 4 KiB.');
      parts.push(chunk);
    },
    end() {
      done(Buffer.concat(parts).toString('utf8'));
    },
  };
}

/** A file part streamed into the store in chunks, counting bytes and non-empty lines against the limits. */
class Upload implements PartSink {
  private buffered: Buffer[] = [];
  private size = 0;
  private bytes = 0;
  private lines = 0;
  /** The current line has content (bytes other than CR). */
  private inLine = false;
  private writer?: ReturnType<BatchStore['createFile']>;
  private ended = false;
  constructor(
    private readonly store: BatchStore,
    private readonly tenantKey: string,
    private readonly filename: string,
    private readonly limits: BatchLimits,
  ) {}
  private open() {
    this.writer ??= this.store.createFile(this.tenantKey, 'batch', this.filename.slice(0, 255) || 'upload.jsonl');
    return this.writer;
  }
  async write(chunk: Buffer) {
    this.bytes += chunk.length;
    if (this.bytes > this.limits.maxFileBytes) throw tooLarge(this.limits.maxFileBytes);
    let start = 0;
    for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, start)) {
      if (this.inLine || hasContent(chunk, start, nl)) this.lines += 1;
      this.inLine = false;
      start = nl + 1;
    }
    if (!this.inLine && hasContent(chunk, start, chunk.length)) this.inLine = true;
    if (this.lines > this.limits.maxLines) throw new WeirError('invalid_request', `The file has more than ${this.limits.maxLines} lines, the limit of a batch input file; split it into several batches.`, { param: 'file' });
    this.buffered.push(chunk);
    this.size += chunk.length;
    if (this.size >= UPLOAD_CHUNK_BYTES) await this.flush();
  }
  private async flush() {
    if (this.size === 0) return;
    const w = await this.open();
    const data = Buffer.concat(this.buffered);
    this.buffered = [];
    this.size = 0;
    await w.append(data);
  }
  end() {
    this.ended = true;
  }
  async commit(): Promise<StoredFile> {
    if (!this.ended) throw new WeirError('invalid_request', 'The file part is incomplete.', { param: 'file' });
    if (this.inLine) this.lines += 1;
    this.inLine = false;
    if (this.lines > this.limits.maxLines) throw new WeirError('invalid_request', `The file has more than ${this.limits.maxLines} lines, the limit of a batch input file; split it into several batches.`, { param: 'file' });
    await this.flush();
    return (await this.open()).commit(this.bytes, this.lines);
  }
  async abort() {
    this.buffered = [];
    if (this.writer) await (await this.writer).abort().catch(() => undefined);
  }
}

/** Whether bytes `[from, to)` hold anything but CR. */
function hasContent(b: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (b[i] !== 13) return true;
  return false;
}
