import type { EngineEvent, TokenUsage } from '@weir/core';
import { WeirError } from '@weir/core';
import { anthropicStreamError } from './anthropic-errors';

/** Weir's end reason for a generation the upstream finished itself. */
export type AnthropicEndReason = Extract<EngineEvent, { type: 'end' }>['reason'];

/**
 * Maps Anthropic's `stop_reason` to Weir's end reason (CONVENTIONS.md §3; ai
 * `packages/anthropic/src/map-anthropic-stop-reason.ts`): `max_tokens` and
 * `model_context_window_exceeded` → `length`; `refusal` → `content_filter`; `end_turn`,
 * `stop_sequence`, `pause_turn` and anything else (`tool_use` cannot occur: Weir sends no
 * tools) → `stop`.
 */
export function mapAnthropicStopReason(stopReason: string): AnthropicEndReason {
  if (stopReason === 'max_tokens' || stopReason === 'model_context_window_exceeded') return 'length';
  if (stopReason === 'refusal') return 'content_filter';
  return 'stop';
}

/** One SSE event as eventsource-parser hands it over. */
export interface SseMessage {
  event?: string;
  data: string;
}

/**
 * Decodes one Messages stream (pure: no I/O). Feed it every SSE event in order; it returns
 * the text each carries and keeps the stop reason and the usage the upstream reported.
 */
export interface AnthropicStreamDecoder {
  /**
   * Applies one event, dispatched on its `event:` name (else `data.type`), as the SDK does.
   * Returns the text of a `content_block_delta` with a `text_delta`, else `''`: `ping`,
   * block starts and stops, and non-text deltas (`thinking_delta`, `signature_delta`,
   * `input_json_delta`, `citations_delta`) carry no output text; unknown events are ignored.
   *
   * @throws WeirError for an `error` event (see `anthropicStreamError`) or a known event whose
   *   data is not JSON (`upstream_error`).
   */
  apply(event: SseMessage): string;
  /** Applies a whole non-stream `Message` body (an upstream that ignored `stream`); returns its text. */
  applyMessage(message: unknown): string;
  /** `message_delta.delta.stop_reason` (or the message's), once sent. */
  readonly stopReason: string | undefined;
  /** True once `message_stop` arrived. */
  readonly finished: boolean;
  /** True once any output text arrived. */
  readonly textStarted: boolean;
  /**
   * The upstream's final usage, once it sent both the input counts (`message_start`) and the
   * final `output_tokens` (`message_delta`), else undefined. `inputTokens` = `input_tokens` +
   * `cache_creation_input_tokens` + `cache_read_input_tokens` (the API reports cache reads and
   * writes apart from `input_tokens`); `cachedInputTokens` = `cache_read_input_tokens` when
   * sent. `message_delta` counts are cumulative totals and overwrite earlier ones.
   */
  reportedUsage(): TokenUsage | undefined;
  /** The input part of the usage ({@link reportedUsage}'s rules) once `message_start` sent it. */
  reportedInput(): Omit<TokenUsage, 'outputTokens'> | undefined;
}

const KNOWN_EVENTS = new Set([
  'message_start',
  'content_block_start',
  'content_block_delta',
  'content_block_stop',
  'message_delta',
  'message_stop',
  'error',
]);

/** Creates a decoder for one stream. */
export function createAnthropicStreamDecoder(): AnthropicStreamDecoder {
  let stopReason: string | undefined;
  let finished = false;
  let textStarted = false;
  let input: number | undefined;
  let cacheRead: number | undefined;
  let cacheCreation: number | undefined;
  let output: number | undefined;

  const applyUsage = (value: unknown, final: boolean): void => {
    if (typeof value !== 'object' || value === null) return;
    const u = value as Record<string, unknown>;
    const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
    input = count(u.input_tokens) ?? input;
    cacheRead = count(u.cache_read_input_tokens) ?? cacheRead;
    cacheCreation = count(u.cache_creation_input_tokens) ?? cacheCreation;
    // `message_start` carries a provisional output count; only the final one is reported.
    if (final) output = count(u.output_tokens) ?? output;
  };
  const text = (piece: unknown): string => {
    if (typeof piece !== 'string' || piece.length === 0) return '';
    textStarted = true;
    return piece;
  };
  const reportedInput = (): Omit<TokenUsage, 'outputTokens'> | undefined =>
    input === undefined
      ? undefined
      : {
          inputTokens: input + (cacheRead ?? 0) + (cacheCreation ?? 0),
          ...(cacheRead !== undefined ? { cachedInputTokens: cacheRead } : {}),
        };

  return {
    apply(event) {
      if (event.event === 'ping') return '';
      if (event.event !== undefined && !KNOWN_EVENTS.has(event.event)) return '';
      let data: Record<string, unknown>;
      try {
        const parsed: unknown = JSON.parse(event.data);
        if (typeof parsed !== 'object' || parsed === null) throw new Error('not an object');
        data = parsed as Record<string, unknown>;
      } catch (error) {
        throw new WeirError('upstream_error', `upstream sent a ${event.event ?? 'stream'} event that is not a JSON object`, { cause: error });
      }
      const type = event.event ?? data.type;
      switch (type) {
        case 'message_start': {
          const message = data.message as Record<string, unknown> | undefined;
          applyUsage(message?.usage, false);
          return '';
        }
        case 'content_block_start': {
          const block = data.content_block as Record<string, unknown> | undefined;
          return block?.type === 'text' ? text(block.text) : '';
        }
        case 'content_block_delta': {
          const delta = data.delta as Record<string, unknown> | undefined;
          return delta?.type === 'text_delta' ? text(delta.text) : '';
        }
        case 'message_delta': {
          const delta = data.delta as Record<string, unknown> | undefined;
          if (typeof delta?.stop_reason === 'string') stopReason = delta.stop_reason;
          applyUsage(data.usage, true);
          return '';
        }
        case 'message_stop':
          finished = true;
          return '';
        case 'error':
          throw anthropicStreamError(data.error, textStarted);
        default:
          return '';
      }
    },
    applyMessage(message) {
      if (typeof message !== 'object' || message === null) throw new WeirError('upstream_error', 'upstream sent a JSON body that is not a message');
      const m = message as Record<string, unknown>;
      if (m.type === 'error') throw anthropicStreamError(m.error, false);
      const blocks = Array.isArray(m.content) ? (m.content as Array<Record<string, unknown>>) : [];
      const body = text(
        blocks
          .filter((b) => b?.type === 'text' && typeof b.text === 'string')
          .map((b) => b.text as string)
          .join(''),
      );
      if (typeof m.stop_reason === 'string') stopReason = m.stop_reason;
      applyUsage(m.usage, true);
      finished = true;
      return body;
    },
    get stopReason() {
      return stopReason;
    },
    get finished() {
      return finished;
    },
    get textStarted() {
      return textStarted;
    },
    reportedUsage() {
      const inputPart = reportedInput();
      if (!inputPart || output === undefined) return undefined;
      return { inputTokens: inputPart.inputTokens, outputTokens: output, ...(inputPart.cachedInputTokens !== undefined ? { cachedInputTokens: inputPart.cachedInputTokens } : {}) };
    },
    reportedInput,
  };
}
