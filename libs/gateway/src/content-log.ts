/**
 * The content log (issue 15, item 5): for a tenant whose policy enables content logging with a
 * redaction profile, one structured line per request with the redacted prompt and output —
 * written off the request path (a `setImmediate` after the answer ended, never awaited), and
 * only after redaction. A redaction that fails or runs over its budget fails closed: no line,
 * an error line without content, and a failure metric.
 */
import type { ApiRoute, Caller, GenerationInput, GenerationOutcome } from '@weir/core';
import type { RedactionResult } from '@weir/redaction';
import type { RedactionCounts, TenantContentPolicy } from './content-policy';
import { promptText } from './content-policy';

/** Where a redaction ran: the content log, or a prompt on its way upstream. */
export type RedactionSurface = 'content_log' | 'upstream';

/** What redaction reports to metrics (`weir_redactions_total{type}`, `weir_redaction_failures_total`). Labels never hold content. */
export interface RedactionObserver {
  /** Spans replaced, by type (a recognizer id or a configured custom pattern name). */
  onRedactions?(counts: Readonly<RedactionCounts>, surface: RedactionSurface): void;
  /** A redaction failed (`error`) or ran over its budget (`timeout`): nothing was logged or sent. */
  onFailure?(reason: 'timeout' | 'error', surface: RedactionSurface): void;
}

/** The logger the content log writes to (pino fits). */
export interface ContentLogLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** One request's content, handed over once its answer ended. */
export interface ContentLogEntry {
  policy: TenantContentPolicy;
  caller: Caller;
  route: ApiRoute;
  alias: string;
  generationId: string;
  /** The prompt as the upstream received it (already redacted when the tenant redacts upstream). */
  input: GenerationInput;
  /** The answer's text (read from the transcript only for tenants that log content). */
  output: string;
  outcome: GenerationOutcome;
}

/**
 * What the content log holds instead of an embedding answer (its deltas' text: one base64 line of
 * float32 bytes per vector): `[N vectors of D dimensions]`, D of the first vector (`[0 vectors]`
 * when there is none). Counts without decoding.
 */
export function embeddingOutputSummary(deltas: string): string {
  let vectors = 0;
  let first = -1;
  for (let i = deltas.indexOf('\n'); i >= 0; i = deltas.indexOf('\n', i + 1)) {
    if (first < 0) first = i;
    vectors++;
  }
  if (vectors === 0) return '[0 vectors]';
  const line = deltas.slice(0, first);
  const padding = line.endsWith('==') ? 2 : line.endsWith('=') ? 1 : 0;
  const dimensions = Math.floor(((line.length / 4) * 3 - padding) / 4);
  return `[${vectors} ${vectors === 1 ? 'vector' : 'vectors'} of ${dimensions} dimensions]`;
}

/** The content log. */
export interface ContentLog {
  /** Queues `entry`; the line is redacted and written on a later turn of the event loop. Never throws. */
  record(entry: ContentLogEntry): void;
  /** Entries queued and not yet written. */
  pending(): number;
}

/** Options of {@link createContentLog}. */
export interface ContentLogOptions {
  logger: ContentLogLogger;
  observer?: RedactionObserver;
  /** Entries queued at most; beyond, new entries are dropped (counted as `content log full` warnings). Default 1,000. */
  maxPending?: number;
  /** Runs a task later (default `setImmediate`); tests may run it at once. */
  defer?: (task: () => void) => void;
}

/** Creates the content log (see the module comment). */
export function createContentLog(options: ContentLogOptions): ContentLog {
  const { logger, observer } = options;
  const maxPending = options.maxPending ?? 1_000;
  const defer = options.defer ?? ((task: () => void) => void setImmediate(task));
  let pending = 0;
  let dropped = 0;

  const write = (e: ContentLogEntry) => {
    // Not the request id: it may be the client's idempotency key, which logs never hold (security.md §10).
    const meta = { tenant: e.caller.tenantId, app: e.caller.appId, generationId: e.generationId, profile: e.policy.profile };
    const prompt = e.policy.logRedactor.redact(promptText(e.input));
    // An embedding's output is vectors, not text: never logged (they can be inverted back to the
    // text they embed), only their count and size.
    const output: RedactionResult = !prompt.ok
      ? prompt
      : e.route === 'embeddings'
        ? { ok: true, text: embeddingOutputSummary(e.output), counts: {}, truncatedChars: 0 }
        : e.policy.logRedactor.redact(e.output);
    if (!prompt.ok || !output.ok) {
      const reason = !prompt.ok ? prompt.reason : !output.ok ? output.reason : 'error';
      observer?.onFailure?.(reason, 'content_log');
      // Fail closed: no content, and no error text (a recognizer's fault may quote it).
      logger.error({ ...meta, reason, ...(reason === 'error' && !prompt.ok && prompt.error instanceof Error ? { errType: prompt.error.name } : {}) }, 'content redaction failed; content not logged');
      return;
    }
    const counts: RedactionCounts = { ...prompt.counts };
    for (const [k, v] of Object.entries(output.counts)) counts[k] = (counts[k] ?? 0) + v;
    if (Object.keys(counts).length > 0) observer?.onRedactions?.(counts, 'content_log');
    logger.info(
      {
        ...meta,
        route: e.route,
        model: e.alias,
        revision: e.outcome.modelRevision,
        finishReason: e.outcome.finishReason,
        inputTokens: e.outcome.usage.inputTokens,
        outputTokens: e.outcome.usage.outputTokens,
        prompt_redacted: prompt.text,
        output_redacted: output.text,
        // As a list: a type named like a secret field (`secret`, `token`) would be censored as a key.
        redactions: Object.entries(counts).map(([type, count]) => ({ type, count })),
        ...(prompt.truncatedChars + output.truncatedChars > 0 ? { truncatedChars: prompt.truncatedChars + output.truncatedChars } : {}),
      },
      'content',
    );
  };

  return {
    pending: () => pending,
    record(entry) {
      if (pending >= maxPending) {
        dropped++;
        // One warning per 100 drops: metadata only.
        if (dropped % 100 === 1) logger.warn({ dropped, maxPending }, 'content log full; entries dropped');
        return;
      }
      pending++;
      defer(() => {
        pending--;
        try {
          write(entry);
        } catch {
          observer?.onFailure?.('error', 'content_log');
          logger.error({ tenant: entry.caller.tenantId, generationId: entry.generationId, reason: 'error' }, 'content redaction failed; content not logged');
        }
      });
    },
  };
}

/** The part of `@weir/telemetry`'s `WeirMetrics` that counts redactions. */
export interface RedactionMetrics {
  recordRedactions(sample: { type: string; surface: string; count: number }): void;
  recordRedactionFailure(failure: { reason: string; surface: string }): void;
}

/** A {@link RedactionObserver} that records `weir_redactions_total{type,surface}` and `weir_redaction_failures_total{reason,surface}`. */
export function redactionMetricsObserver(metrics: RedactionMetrics): RedactionObserver {
  return {
    onRedactions(counts, surface) {
      for (const [type, count] of Object.entries(counts)) metrics.recordRedactions({ type, surface, count });
    },
    onFailure(reason, surface) {
      metrics.recordRedactionFailure({ reason, surface });
    },
  };
}

/**
 * The content-policy options from the environment: `WEIR_REDACTION_HASH_KEY` (at least 32
 * characters) keys the `hash` replacement so hashes correlate across processes; unset, each
 * process draws a random key. Throws when it is set and shorter.
 */
export function contentPolicyOptionsFromEnv(env: Readonly<Record<string, string | undefined>>): { log?: { hashKey: string }; upstream?: { hashKey: string } } {
  const key = env.WEIR_REDACTION_HASH_KEY;
  if (key === undefined || key === '') return {};
  if (key.length < 32) throw new Error('WEIR_REDACTION_HASH_KEY must be at least 32 characters (a random secret); unset it to use a random key per process');
  return { log: { hashKey: key }, upstream: { hashKey: key } };
}
