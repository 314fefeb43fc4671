/**
 * The storage port of asynchronous batches (OpenAI's Batch API, docs/batch.md): files kept in
 * chunks (never whole in memory), batches, and their items as a durable work queue with leases.
 * The embedded default is Postgres (`createPgBatchStore` of `@weir/store-pg`); a fleet may put
 * files behind an object store with the same port.
 */
import type { Caller } from './services';

/** OpenAI's file purposes Weir stores: `batch` (uploaded input) and `batch_output` (output and error files). */
export type BatchFilePurpose = 'batch' | 'batch_output';

/** A stored file's metadata (OpenAI's `FileObject` fields, in Weir's names). */
export interface StoredFile {
  id: string;
  /** The owning tenant's internal id (`tenantKeyOf`). */
  tenantKey: string;
  purpose: BatchFilePurpose;
  filename: string;
  /** Size in bytes. */
  bytes: number;
  /** Non-empty lines (JSONL records). */
  lines: number;
  /** Unix seconds. */
  createdAtS: number;
}

/** A file being written: chunks appended in order, then committed (until then it is invisible). */
export interface FileWriter {
  readonly id: string;
  /** Appends the next chunk (bytes as given; any size, a few hundred KiB is a good unit). */
  append(chunk: Buffer): Promise<void>;
  /** Makes the file visible with its final size and line count. */
  commit(bytes: number, lines: number): Promise<StoredFile>;
  /** Deletes what was written (a refused or failed upload). */
  abort(): Promise<void>;
}

/** OpenAI's batch statuses. */
export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

/** One validation error of a batch's input file (OpenAI's `BatchError`); `line` is 1-based. */
export interface BatchInputError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

/** A batch as stored. Times are Unix seconds (null until reached). */
export interface StoredBatch {
  id: string;
  tenantKey: string;
  /** Whom items run as: the caller that created the batch (its tenant, app and key). */
  caller: Caller;
  endpoint: string;
  inputFileId: string;
  completionWindow: string;
  status: BatchStatus;
  /** The status a draining batch ends in: `completed` (finalizing), `expired`, or `cancelled` (cancelling). */
  finalStatus: 'completed' | 'expired' | 'cancelled' | null;
  outputFileId: string | null;
  errorFileId: string | null;
  errors: BatchInputError[] | null;
  metadata: Record<string, string> | null;
  /** The model of the lines (when every line names one). */
  model: string | null;
  total: number;
  completed: number;
  failed: number;
  /** Summed usage of the items run so far. */
  usage: { inputTokens: number; outputTokens: number; cachedTokens: number };
  /** Why the batch is held (e.g. `budget_exhausted`) and until when (epoch ms); null while it runs. */
  paused: { reason: string; message: string; untilMs: number } | null;
  createdAtS: number;
  inProgressAtS: number | null;
  expiresAtS: number;
  finalizingAtS: number | null;
  completedAtS: number | null;
  failedAtS: number | null;
  expiredAtS: number | null;
  cancellingAtS: number | null;
  cancelledAtS: number | null;
}

/** A new item of a validated batch: one input line. */
export interface NewBatchItem {
  /** 0-based index of the line among the file's non-empty lines. */
  index: number;
  customId: string;
  /** The request body (JSON). */
  body: unknown;
}

/** An item leased to a runner. */
export interface LeasedItem {
  batchId: string;
  index: number;
  customId: string;
  body: unknown;
  /** Runs so far, this one included. */
  attempts: number;
  /** Whom it runs as: the batch's creator. */
  caller: Caller;
  /** The batch's endpoint (`/v1/chat/completions`, ...). */
  endpoint: string;
  /** The batch was paused (its pause has ended): the first success lifts the pause. */
  batchPaused: boolean;
  /** The lease's fencing token: only its holder may complete or release the item. */
  token: string;
  leaseUntilMs: number;
}

/** An item's outcome: OpenAI's output line (`response` or `error`), plus its usage. */
export interface ItemResult {
  /** True: the line goes to the output file; false: to the error file. */
  ok: boolean;
  /** The whole line, as JSON: `{id, custom_id, response, error}`. */
  line: string;
  usage?: { inputTokens: number; outputTokens: number; cachedTokens: number };
}

/** A page of a tenant's objects, newest first (OpenAI's cursor page: `after` is the last id of the previous page). */
export interface Page<T> {
  data: T[];
  hasMore: boolean;
}

/** The batch storage port (see the module comment). Every read is scoped to a tenant: another tenant's id is not found. */
export interface BatchStore {
  // ---- files ----
  /** Starts a file (invisible until committed). */
  createFile(tenantKey: string, purpose: BatchFilePurpose, filename: string): Promise<FileWriter>;
  getFile(tenantKey: string, id: string): Promise<StoredFile | undefined>;
  listFiles(tenantKey: string, opts: { after?: string; limit: number; order: 'asc' | 'desc'; purpose?: string }): Promise<Page<StoredFile>>;
  /** The file's bytes, chunk by chunk (one chunk in memory at a time). */
  readFile(tenantKey: string, id: string): AsyncIterable<Buffer>;
  /** True when it existed. */
  deleteFile(tenantKey: string, id: string): Promise<boolean>;
  // ---- batches ----
  createBatch(b: { id: string; tenantKey: string; caller: Caller; endpoint: string; inputFileId: string; completionWindow: string; metadata: Record<string, string> | null; createdAtS: number; expiresAtS: number }): Promise<StoredBatch>;
  getBatch(tenantKey: string, id: string): Promise<StoredBatch | undefined>;
  listBatches(tenantKey: string, opts: { after?: string; limit: number }): Promise<Page<StoredBatch>>;
  /** `validating`/`in_progress` → `cancelling` (or straight to `cancelled` while validating); the batch as it is after; undefined when not found. */
  cancelBatch(tenantKey: string, id: string, nowS: number): Promise<StoredBatch | undefined>;
  // ---- the runner's side ----
  /** Leases one batch in `status` (validating, or draining: finalizing/cancelling with no live item lease) for `ms`. */
  leaseBatch(kind: 'validate' | 'finalize', owner: string, nowMs: number, ms: number): Promise<StoredBatch | undefined>;
  /** Stores validated items (in pages, while the batch is `validating`: none runs yet). */
  addItems(batchId: string, items: NewBatchItem[]): Promise<void>;
  /** `validating` → `in_progress` with `total` items (or `failed` with `errors`, deleting any items); releases the batch lease. */
  finishValidation(batchId: string, outcome: { total: number; model: string | null } | { errors: BatchInputError[] }, nowS: number): Promise<void>;
  /** Moves `in_progress` batches past their window to draining towards `expired`; how many. */
  expireDue(nowS: number): Promise<number>;
  /** Leases up to `n` runnable items (pending, or running with an expired lease) of running, unpaused batches, `FOR UPDATE SKIP LOCKED`. */
  leaseItems(owner: string, n: number, nowMs: number, leaseMs: number): Promise<LeasedItem[]>;
  /** Extends a lease the holder still has; false when it was lost. */
  renewItem(item: LeasedItem, nowMs: number, leaseMs: number): Promise<boolean>;
  /** Writes an item's result under its lease (fenced by the token); false when the lease was lost (the result is dropped). */
  completeItem(item: LeasedItem, result: ItemResult): Promise<boolean>;
  /** Gives an item back to the queue, runnable from `notBeforeMs`; the attempt is not counted unless `countAttempt` (default false). */
  releaseItem(item: LeasedItem, notBeforeMs: number, countAttempt?: boolean): Promise<boolean>;
  /** Holds a running batch until `untilMs` (e.g. its tenant's budget is spent); null clears it. */
  pauseBatch(batchId: string, paused: { reason: string; message: string; untilMs: number } | null): Promise<void>;
  /**
   * Ends a draining batch: every item without a result gets `unfinishedLine(customId, index)` as
   * an error line, output and error files are written (in line order, page by page), and the
   * batch takes its final status. Fenced by the batch lease of `owner`.
   */
  finalizeBatch(batchId: string, owner: string, unfinished: (customId: string, index: number, status: 'expired' | 'cancelled' | 'completed') => string, nowS: number): Promise<StoredBatch | undefined>;
}
