/**
 * Validation of a batch's input file (docs/batch.md): every line, before anything runs, read as
 * a stream (one line in memory at a time), with OpenAI's line-numbered errors.
 */
import { type BatchInputError, type NewBatchItem, WeirError } from '@weir/core';
import { CHAT_COMPLETIONS_FIELDS, CHAT_UNSUPPORTED_HINTS, chatCompletionsBody, COMPLETIONS_FIELDS, completionsBody, parseBody, refuseUnknownFields } from '../schemas';
import { EMBEDDINGS_FIELDS, embeddingsBody } from '../embeddings-route';
import { RESPONSES_OPENAI_FIELDS, responsesOpenAiBody } from '../responses-body';

/** The endpoints a batch may run, as OpenAI names them. */
export const BATCH_ENDPOINTS: readonly string[] = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/responses'];

/** Limits of an input file. OpenAI's defaults: 200 MB, 50,000 lines. */
export interface BatchLimits {
  /** Largest file accepted (bytes). Default 209,715,200 (200 MiB). */
  maxFileBytes: number;
  /** Most lines (requests) in a file. Default 50,000. */
  maxLines: number;
  /** Longest line (bytes). Default the gateway's request body limit. */
  maxLineBytes: number;
}

/** OpenAI's limits (200 MB, 50,000 lines) with a 1 MiB line. */
export const DEFAULT_BATCH_LIMITS: BatchLimits = Object.freeze({ maxFileBytes: 200 * 1024 * 1024, maxLines: 50_000, maxLineBytes: 1024 * 1024 });

/** Errors kept per file (the rest are counted in the last one's message). */
const MAX_ERRORS = 100;

type Schema = { fields: ReadonlySet<string>; hints: Readonly<Record<string, string>>; parse: (body: unknown) => { model?: unknown } };

const SCHEMAS: Readonly<Record<string, Schema>> = {
  '/v1/chat/completions': { fields: CHAT_COMPLETIONS_FIELDS, hints: CHAT_UNSUPPORTED_HINTS, parse: (b) => parseBody(chatCompletionsBody, b) },
  '/v1/completions': { fields: COMPLETIONS_FIELDS, hints: {}, parse: (b) => parseBody(completionsBody, b) },
  '/v1/embeddings': { fields: EMBEDDINGS_FIELDS, hints: {}, parse: (b) => parseBody(embeddingsBody, b) },
  '/v1/responses': { fields: RESPONSES_OPENAI_FIELDS, hints: {}, parse: (b) => parseBody(responsesOpenAiBody, b) },
};

/** The result of {@link validateBatchInput}: the items (delivered in pages) and the model, or the errors. */
export type ValidationResult = { ok: true; total: number; model: string | null } | { ok: false; errors: BatchInputError[] };

/**
 * Reads `chunks` (a JSONL file) line by line and checks every line: JSON object, `custom_id` a
 * non-empty string unique in the file, `method` `POST`, `url` the batch's `endpoint`, `body` an
 * object valid for that route (the route's own schema: unknown fields, types, ranges), no
 * `stream`. Valid items go to `onItems` in pages of `pageSize` (only while no error was found:
 * a file with errors stores nothing more). Empty lines are skipped (not counted).
 */
export async function validateBatchInput(
  chunks: AsyncIterable<Buffer>,
  endpoint: string,
  limits: BatchLimits,
  onItems: (items: NewBatchItem[]) => Promise<void>,
  pageSize = 500,
): Promise<ValidationResult> {
  const errors: BatchInputError[] = [];
  let dropped = 0;
  const fail = (e: BatchInputError) => {
    if (errors.length < MAX_ERRORS) errors.push(e);
    else dropped += 1;
  };
  const seen = new Set<string>();
  const models = new Set<string>();
  let page: NewBatchItem[] = [];
  let index = 0;
  let lineNo = 0;
  let bytes = 0;
  let partial: Buffer[] = [];
  let partialBytes = 0;
  let tooLong = false;

  const take = async (raw: Buffer) => {
    lineNo += 1;
    const text = raw.toString('utf8').replace(/\r$/, '');
    if (text.trim() === '') return;
    if (index >= limits.maxLines) {
      if (index === limits.maxLines) fail({ code: 'too_many_lines', message: `The file has more than ${limits.maxLines} requests, the limit of one batch; split it into several batches.`, param: null, line: lineNo });
      index += 1;
      return;
    }
    const item = checkLine(text, lineNo, endpoint, seen, models, fail);
    if (item) {
      item.index = index;
      if (errors.length === 0) {
        page.push(item);
        if (page.length >= pageSize) {
          await onItems(page);
          page = [];
        }
      }
    }
    index += 1;
  };

  for await (const chunk of chunks) {
    bytes += chunk.length;
    if (bytes > limits.maxFileBytes) {
      fail({ code: 'file_too_large', message: `The input file is larger than ${limits.maxFileBytes} bytes, the limit of one batch.`, param: null, line: null });
      return { ok: false, errors };
    }
    let start = 0;
    for (let nl = chunk.indexOf(10, start); nl >= 0; nl = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, nl);
      start = nl + 1;
      if (tooLong || partialBytes + piece.length > limits.maxLineBytes) {
        lineNo += 1;
        fail({ code: 'line_too_long', message: `Line ${lineNo} is longer than ${limits.maxLineBytes} bytes.`, param: null, line: lineNo });
        index += 1;
      } else {
        await take(partial.length > 0 ? Buffer.concat([...partial, piece]) : piece);
      }
      partial = [];
      partialBytes = 0;
      tooLong = false;
    }
    const rest = chunk.subarray(start);
    if (rest.length > 0 && !tooLong) {
      partialBytes += rest.length;
      if (partialBytes > limits.maxLineBytes) {
        tooLong = true;
        partial = [];
      } else partial.push(Buffer.from(rest));
    }
  }
  if (tooLong) {
    lineNo += 1;
    fail({ code: 'line_too_long', message: `Line ${lineNo} is longer than ${limits.maxLineBytes} bytes.`, param: null, line: lineNo });
  } else if (partialBytes > 0) await take(Buffer.concat(partial));
  if (index === 0 && errors.length === 0) fail({ code: 'empty_file', message: 'The input file has no requests.', param: null, line: null });
  if (dropped > 0) errors.push({ code: 'too_many_errors', message: `${dropped} more errors not listed (the first ${MAX_ERRORS} are); fix these and validate again.`, param: null, line: null });
  if (errors.length > 0) return { ok: false, errors };
  if (page.length > 0) await onItems(page);
  return { ok: true, total: index, model: models.size === 1 ? [...models][0] : null };
}

/** One line checked; its item (index set by the caller) or undefined after reporting its errors. */
function checkLine(text: string, line: number, endpoint: string, seen: Set<string>, models: Set<string>, fail: (e: BatchInputError) => void): NewBatchItem | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    fail({ code: 'invalid_json_line', message: `Line ${line} is not valid JSON; each line must be one JSON object.`, param: null, line });
    return undefined;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    fail({ code: 'invalid_json_line', message: `Line ${line} is not a JSON object.`, param: null, line });
    return undefined;
  }
  const o = value as Record<string, unknown>;
  let ok = true;
  const bad = (code: string, param: string, message: string) => {
    ok = false;
    fail({ code, message: `Line ${line}: ${message}`, param, line });
  };
  const customId = o.custom_id;
  if (typeof customId !== 'string' || customId.length === 0) bad('missing_custom_id', 'custom_id', '`custom_id` must be a non-empty string.');
  else if (customId.length > 512) bad('invalid_custom_id', 'custom_id', '`custom_id` is longer than 512 characters.');
  else if (seen.has(customId)) bad('duplicate_custom_id', 'custom_id', `\`custom_id\` '${customId.slice(0, 64)}' is used by an earlier line; each must be unique in the file.`);
  else seen.add(customId);
  if (o.method !== 'POST') bad('invalid_method', 'method', '`method` must be "POST".');
  const urlOk = o.url === endpoint;
  if (typeof o.url !== 'string' || !BATCH_ENDPOINTS.includes(o.url)) bad('invalid_url', 'url', `\`url\` must be one of ${BATCH_ENDPOINTS.join(', ')}.`);
  else if (o.url !== endpoint) bad('mismatched_url', 'url', `\`url\` is ${o.url}, but the batch's endpoint is ${endpoint}; every line must use the batch's endpoint.`);
  const body = o.body;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    bad('invalid_body', 'body', '`body` must be a JSON object (the request for the endpoint).');
    return undefined;
  }
  const b = body as Record<string, unknown>;
  if (b.stream === true) bad('invalid_body', 'body.stream', '`body.stream` must not be true: batch requests are answered whole.');
  // The body is judged by the route its line names (a line naming another route has said what is wrong).
  const schema = urlOk ? SCHEMAS[endpoint] : undefined;
  // A line runs with no request around it to fall back on: it names its model (as OpenAI
  // requires) or a use case its tenant's policy routes (a body may omit `model` for that).
  if (schema && typeof b.model !== 'string' && typeof b.use_case !== 'string') {
    bad('invalid_body', 'body.model', '`body.model` is required: name the model alias (or a `use_case` your policy defines) on every line.');
    return undefined;
  }
  if (schema) {
    try {
      refuseUnknownFields(b, schema.fields, schema.hints, endpoint);
      schema.parse(b);
    } catch (err) {
      if (!(err instanceof WeirError)) throw err;
      ok = false;
      fail({ code: 'invalid_body', message: `Line ${line}: ${err.message}`, param: err.param ? `body.${err.param}` : 'body', line });
    }
  }
  if (typeof b.model === 'string') models.add(b.model);
  return ok ? { index: -1, customId: customId as string, body: b } : undefined;
}

/**
 * Batch limits from the environment: `WEIR_BATCH_MAX_FILE_BYTES` (default 200 MiB) and
 * `WEIR_BATCH_MAX_LINES` (default 50,000); a line may be as long as a request body
 * (`maxLineBytes`). Throws naming the variable when a value is not a positive whole number.
 */
export function batchLimitsFromEnv(env: Record<string, string | undefined>, maxLineBytes: number): BatchLimits {
  const read = (name: string, dflt: number) => {
    const v = env[name];
    if (v === undefined || v.trim() === '') return dflt;
    const n = Number(v.trim());
    if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${name} must be a positive whole number (got '${v}')`);
    return n;
  };
  return { maxFileBytes: read('WEIR_BATCH_MAX_FILE_BYTES', DEFAULT_BATCH_LIMITS.maxFileBytes), maxLines: read('WEIR_BATCH_MAX_LINES', DEFAULT_BATCH_LIMITS.maxLines), maxLineBytes };
}
