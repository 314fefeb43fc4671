/**
 * The batch runner (docs/batch.md): validates new batches, leases their items from the store's
 * queue and runs each through the gateway's own route in-process at batch priority — so each
 * item is admitted, reserved, scheduled on the batch pool, settled and recorded in the ledger
 * like any request, when it starts — writes each result under its lease, holds a batch whose
 * tenant's budget is spent, expires batches at their window and finalizes them into output and
 * error files. Any number of runners may share one store (each item goes to one of them).
 */
import { randomBytes } from 'node:crypto';
import type { BatchStore, Caller, ItemResult, LeasedItem, StoredBatch } from '@weir/core';
import type { InternalRequest, InternalResponse } from '../internal-dispatch';
import type { GatewayLogger } from '../app';
import { UNBILLED_INTERRUPTION_MARK } from '@weir/ledger';
import { type BatchLimits, validateBatchInput } from './validate';

/** Keys an item may move on to after runs interrupted before any output (each billed nothing). */
const MAX_UNBILLED_RERUNS = 8;

/** A 409 saying the key's run was interrupted before any output was recorded (so billed nothing). */
function interruptedUnbilled(r: InternalResponse): boolean {
  if (r.status !== 409) return false;
  const message = (r.body as { error?: { message?: unknown } } | undefined)?.error?.message;
  return typeof message === 'string' && message.includes(UNBILLED_INTERRUPTION_MARK);
}

/** Options of {@link startBatchRunner}. */
export interface BatchRunnerOptions {
  store: BatchStore;
  /** Runs one request in-process as `caller` (`Gateway.dispatch`). */
  dispatch: (caller: Caller, request: InternalRequest) => Promise<InternalResponse>;
  logger: GatewayLogger;
  /** Input limits checked again at validation. */
  limits: BatchLimits;
  /** Items run at once by this runner. Default 4. */
  concurrency?: number;
  /** An item's lease (ms), renewed every third of it while the item runs. Default 120,000. */
  leaseMs?: number;
  /** How often the queue is looked at when idle (ms). Default 1,000. */
  pollMs?: number;
  /** How long a batch is held after its tenant's budget was found spent (ms) before an item is tried again. Default 60,000. */
  budgetPauseMs?: number;
  /** Runs of an item ending in a retryable refusal (429 rate limits, 503) before its last answer is its result. Default 5. */
  maxAttempts?: number;
  /** Epoch ms. Default `Date.now`. */
  now?: () => number;
  /** This runner's id in leases. Default `runner-<random>`. */
  owner?: string;
}

/** A running batch runner. */
export interface BatchRunner {
  /** Looks at the queue now (a batch was created or cancelled). */
  poke(): void;
  /** Stops taking work and waits up to `graceMs` for items in flight (what is left is retried by the next runner once its lease expires). */
  stop(graceMs?: number): Promise<void>;
}

/** The OpenAI output line of one item. */
function outputLine(item: { customId: string }, response: { status_code: number; request_id: string; body: unknown } | null, error: { code: string; message: string } | null): string {
  return JSON.stringify({ id: `batch_req_${randomBytes(12).toString('hex')}`, custom_id: item.customId, response, error });
}

/** An item's token usage, read from its response body (chat/completions/embeddings: `prompt_tokens`; responses: `input_tokens`). */
function usageOf(body: unknown): ItemResult['usage'] {
  const u = (body as { usage?: Record<string, unknown> } | undefined)?.usage;
  if (!u || typeof u !== 'object') return undefined;
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as { cached_tokens?: unknown } | undefined;
  return { inputTokens: n(u.prompt_tokens ?? u.input_tokens), outputTokens: n(u.completion_tokens ?? u.output_tokens), cachedTokens: n(details?.cached_tokens) };
}

/** Leases beyond `maxAttempts` an item may take when its runners die before writing a result. */
const CRASH_ALLOWANCE = 3;

/** Starts a runner; it polls until stopped. */
export function startBatchRunner(options: BatchRunnerOptions): BatchRunner {
  const { store, dispatch, logger, limits } = options;
  const concurrency = options.concurrency ?? 4;
  const leaseMs = options.leaseMs ?? 120_000;
  const pollMs = options.pollMs ?? 1_000;
  const budgetPauseMs = options.budgetPauseMs ?? 60_000;
  const maxAttempts = options.maxAttempts ?? 5;
  const now = options.now ?? Date.now;
  const owner = options.owner ?? `runner-${randomBytes(6).toString('hex')}`;
  const inflight = new Set<Promise<void>>();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let again = false;

  const schedule = (ms: number) => {
    if (stopped) return;
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => void tick(), ms);
    timer.unref();
  };

  const tick = async (): Promise<void> => {
    if (running) {
      again = true;
      return;
    }
    running = (async () => {
      try {
        await step();
      } catch (err) {
        logger.warn({ err }, 'batch runner step failed; retrying');
      }
    })();
    await running;
    running = undefined;
    if (again) {
      again = false;
      schedule(0);
    } else schedule(pollMs);
  };

  const step = async () => {
    const nowMs = now();
    await store.expireDue(Math.floor(nowMs / 1000));
    for (let b = await store.leaseBatch('validate', owner, now(), leaseMs); b && !stopped; b = await store.leaseBatch('validate', owner, now(), leaseMs)) await validate(b);
    for (let b = await store.leaseBatch('finalize', owner, now(), leaseMs); b && !stopped; b = await store.leaseBatch('finalize', owner, now(), leaseMs)) await finalize(b);
    if (stopped) return;
    const free = concurrency - inflight.size;
    if (free <= 0) return;
    const items = await store.leaseItems(owner, free, now(), leaseMs);
    for (const item of items) {
      const p: Promise<void> = runItem(item)
        .catch((err: unknown) => logger.warn({ err, batchId: item.batchId, index: item.index }, 'batch item failed to run; it is retried after its lease'))
        .finally(() => {
          inflight.delete(p);
          schedule(0);
        });
      inflight.add(p);
    }
  };

  const validate = async (b: StoredBatch) => {
    const t = now();
    const outcome = await validateBatchInput(store.readFile(b.tenantKey, b.inputFileId), b.endpoint, limits, (items) => store.addItems(b.id, items));
    const nowS = Math.floor(now() / 1000);
    if (outcome.ok) await store.finishValidation(b.id, { total: outcome.total, model: outcome.model }, nowS);
    else await store.finishValidation(b.id, { errors: outcome.errors }, nowS);
    logger.info({ batchId: b.id, tenant: b.caller.tenantId, ok: outcome.ok, ...(outcome.ok ? { total: outcome.total } : { errors: outcome.errors.length }), ms: now() - t }, 'batch validated');
  };

  const finalize = async (b: StoredBatch) => {
    const nowS = Math.floor(now() / 1000);
    const final = await store.finalizeBatch(
      b.id,
      owner,
      (customId, _index, status) =>
        outputLine(
          { customId },
          null,
          status === 'expired'
            ? { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' }
            : status === 'cancelled'
              ? { code: 'batch_cancelled', message: 'This request was not executed because the batch was cancelled.' }
              : { code: 'batch_item_abandoned', message: 'This request was not executed.' },
        ),
      nowS,
    );
    if (final) logger.info({ batchId: b.id, tenant: b.caller.tenantId, status: final.status, completed: final.completed, failed: final.failed }, 'batch finalized');
  };

  const runItem = async (item: LeasedItem) => {
    const meta = { caller: item.caller, endpoint: item.endpoint };
    // Leased again and again without a result (its runners keep dying on it): give it an error
    // line rather than loop. Replays are safe, so the bound is generous.
    if (item.attempts > maxAttempts + CRASH_ALLOWANCE) {
      await store.completeItem(item, { ok: false, line: outputLine(item, null, { code: 'batch_item_failed', message: `This request was started ${item.attempts - 1} times without a result being recorded; it was not run again.` }) });
      logger.warn({ batchId: item.batchId, index: item.index, attempts: item.attempts }, 'batch item given up after repeated runs without a result');
      return;
    }
    const renew = setInterval(() => void store.renewItem(item, now(), leaseMs).catch(() => undefined), Math.max(1_000, Math.floor(leaseMs / 3)));
    renew.unref();
    let r: InternalResponse;
    try {
      // One key per item: a run after a crash replays the first run's result (or is told it was
      // interrupted) — never a second generation, never a second charge. A key whose run was
      // interrupted before any output was recorded billed nothing: the item runs again under the
      // next key of its sequence (`-r1`, `-r2`, …), itself replayed or told of after another crash.
      for (let k = 0; ; k++) {
        r = await dispatch(meta.caller, {
          method: 'POST',
          path: meta.endpoint,
          body: item.body,
          headers: {
            'content-type': 'application/json',
            'idempotency-key': k === 0 ? `${item.batchId}-${item.index}` : `${item.batchId}-${item.index}-r${k}`,
            'x-weir-priority': 'batch',
          },
        });
        if (k >= MAX_UNBILLED_RERUNS || !interruptedUnbilled(r)) break;
      }
    } finally {
      clearInterval(renew);
    }
    const error = (r.body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
    const code = typeof error?.code === 'string' ? error.code : undefined;
    if (r.status === 429 && code === 'budget_exhausted') {
      // The tenant's budget is spent: hold the batch (it stays in progress) and try again later.
      const untilMs = now() + budgetPauseMs;
      await store.releaseItem(item, untilMs);
      await store.pauseBatch(item.batchId, { reason: 'budget_exhausted', message: typeof error?.message === 'string' ? error.message : 'The tenant’s budget is spent.', untilMs });
      logger.info({ batchId: item.batchId, tenant: meta.caller.tenantId, untilMs }, 'batch paused: budget exhausted');
      return;
    }
    const retryable = (r.status === 429 || r.status === 503 || r.status === 504) && r.headers['x-should-retry'] !== 'false';
    if (retryable && item.attempts < maxAttempts) {
      const hinted = Number(r.headers['retry-after-ms']);
      const backoff = Number.isFinite(hinted) && hinted > 0 ? Math.min(hinted, 60_000) : Math.min(60_000, 1_000 * 2 ** (item.attempts - 1));
      await store.releaseItem(item, now() + backoff, true);
      return;
    }
    // The batch runs again (a budget pause is lifted by the first item that gets through).
    if (r.status < 300 && item.batchPaused) await store.pauseBatch(item.batchId, null);
    const ok = r.status >= 200 && r.status < 300;
    const line = outputLine(item, { status_code: r.status, request_id: r.headers['x-request-id'] ?? '', body: r.body ?? null }, null);
    const written = await store.completeItem(item, { ok, line, ...(ok ? { usage: usageOf(r.body) } : {}) });
    if (!written) logger.warn({ batchId: item.batchId, index: item.index }, 'batch item result dropped: its lease was lost to another runner');
  };

  schedule(0);
  return {
    poke: () => schedule(0),
    async stop(graceMs = 10_000) {
      stopped = true;
      if (timer) clearTimeout(timer);
      const all = Promise.all([...inflight, running]);
      await Promise.race([all, new Promise((r) => setTimeout(r, graceMs).unref())]);
    },
  };
}

/**
 * The runner's settings from the environment: `WEIR_BATCH_CONCURRENCY` (items at once, default
 * 4) and `WEIR_BATCH_LEASE_MS` (an item's lease, default 120,000; a runner that died leaves its
 * items to others after this long). Throws naming the variable when a value is not a positive
 * whole number.
 */
export function batchRunnerOptionsFromEnv(env: Record<string, string | undefined>): Pick<BatchRunnerOptions, 'concurrency' | 'leaseMs'> {
  const out: Pick<BatchRunnerOptions, 'concurrency' | 'leaseMs'> = {};
  for (const [name, key] of [
    ['WEIR_BATCH_CONCURRENCY', 'concurrency'],
    ['WEIR_BATCH_LEASE_MS', 'leaseMs'],
  ] as const) {
    const v = env[name];
    if (v === undefined || v.trim() === '') continue;
    const n = Number(v.trim());
    if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${name} must be a positive whole number (got '${v}')`);
    out[key] = n;
  }
  return out;
}
