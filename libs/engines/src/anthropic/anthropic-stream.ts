import type { EngineEvent, TokenUsage, ToolCallDelta } from '@weir/core';
import { WeirError } from '@weir/core';
import { anthropicStreamError } from './anthropic-errors';

/** Weir's end reason for a generation the upstream finished itself. */
export type AnthropicEndReason = Extract<EngineEvent, { type: 'end' }>['reason'];

/**
 * Maps Anthropic's `stop_reason` to Weir's end reason (CONVENTIONS.md §3; ai
 * `packages/anthropic/src/map-anthropic-stop-reason.ts`): `max_tokens` and
 * `model_context_window_exceeded` → `length`; `refusal` → `content_filter`; `tool_use` →
 * `tool_calls`; `end_turn`, `stop_sequence`, `pause_turn` and anything else → `stop`.
 */
export function mapAnthropicStopReason(stopReason: string): AnthropicEndReason {
  if (stopReason === 'max_tokens' || stopReason === 'model_context_window_exceeded') return 'length';
  if (stopReason === 'tool_use') return 'tool_calls';
  if (stopReason === 'refusal') return 'content_filter';
  return 'stop';
}

/** One SSE event as eventsource-parser hands it over. */
export interface SseMessage {
  event?: string;
  data: string;
}

/** What one event (or a whole message) carries for the client: text and tool-call fragments. */
export interface AnthropicPiece {
  text: string;
  /** Tool-call fragments in Weir's shape (OpenAI's `delta.tool_calls`); absent when none. */
  toolCalls?: ToolCallDelta[];
}

/**
 * Decodes one Messages stream (pure: no I/O). Feed it every SSE event in order; it returns
 * the text and tool-call fragments each carries and keeps the stop reason and the usage the
 * upstream reported.
 */
export interface AnthropicStreamDecoder {
  /**
   * Applies one event like {@link apply}, and returns its text and tool-call fragments: a
   * `content_block_start` of type `tool_use` opens call `index` (numbered 0, 1, … in order of
   * appearance, whatever the block index) with its `id` and `name`; each non-empty
   * `input_json_delta.partial_json` of that block is an `argumentsDelta` of that call.
   * @throws as {@link apply}.
   */
  decode(event: SseMessage): AnthropicPiece;
  /** {@link applyMessage} with the message's `tool_use` blocks as whole calls (`input` as JSON text). */
  decodeMessage(message: unknown): AnthropicPiece;
  /**
   * Applies one event, dispatched on its `event:` name (else `data.type`), as the SDK does.
   * Returns the text of a `content_block_delta` with a `text_delta`, else `''`: `ping`,
   * block starts and stops, and non-text deltas (`thinking_delta`, `signature_delta`,
   * `input_json_delta`, `citations_delta`) carry no output text; unknown events are ignored.
   * Tool-call fragments are dropped: use {@link decode} for them.
   *
   * @throws WeirError for an `error` event (see `anthropicStreamError`) or a known event whose
   *   data is not JSON (`upstream_error`).
   */
  apply(event: SseMessage): string;
  /** Applies a whole non-stream `Message` body (an upstream that ignored `stream`); returns its text. */
  applyMessage(message: unknown): string;
  /** `message_delta.delta.stop_reason` (or the message's), once sent. */
  readonly stopReason: string | undefined;
  /** `message_delta.delta.stop_sequence` (or the message's): the stop sequence that matched, when one did. */
  readonly stopSequence: string | undefined;
  /** True once `message_stop` arrived. */
  readonly finished: boolean;
  /** True once any output text or tool call arrived. */
  readonly textStarted: boolean;
  /**
   * The upstream's final usage, once it sent both the input counts (`message_start`) and the
   * final `output_tokens` (`message_delta`), else undefined. `inputTokens` = `input_tokens` +
   * `cache_creation_input_tokens` + `cache_read_input_tokens` (the API reports cache reads and
   * writes apart from `input_tokens`); `cachedInputTokens` = `cache_read_input_tokens` when
   * sent, `cacheWriteInputTokens` = `cache_creation_input_tokens` when positive (no reasoning
   * class: Anthropic counts thinking inside `output_tokens` and reports no split). `message_delta` counts are cumulative totals and overwrite earlier ones.
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
  let stopSequence: string | undefined;
  let finished = false;
  let textStarted = false;
  let input: number | undefined;
  let cacheRead: number | undefined;
  let cacheCreation: number | undefined;
  let output: number | undefined;
  /** Block index → tool-call index, for the tool_use blocks seen. */
  const toolBlocks = new Map<number, number>();

  const applyUsage = (value: unknown, final: boolean): void => {
    if (typeof value !== 'object' || value === null) return;
    const u = value as Record<string, unknown>;
    // A count must be a non-negative whole number; anything else is ignored, never billed or priced.
    const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined);
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
          ...(cacheCreation !== undefined && cacheCreation > 0 ? { cacheWriteInputTokens: cacheCreation } : {}),
        };

  const none: AnthropicPiece = { text: '' };
  const textPiece = (piece: unknown): AnthropicPiece => ({ text: text(piece) });
  const toolPiece = (call: ToolCallDelta): AnthropicPiece => {
    textStarted = true;
    return { text: '', toolCalls: [call] };
  };

  const decode = (event: SseMessage): AnthropicPiece => {
    if (event.event === 'ping') return none;
    if (event.event !== undefined && !KNOWN_EVENTS.has(event.event)) return none;
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
        return none;
      }
      case 'content_block_start': {
        const block = data.content_block as Record<string, unknown> | undefined;
        if (block?.type === 'tool_use' && typeof block.id === 'string' && typeof block.name === 'string' && typeof data.index === 'number') {
          const index = toolBlocks.size;
          toolBlocks.set(data.index, index);
          return toolPiece({ index, id: block.id, name: block.name });
        }
        return block?.type === 'text' ? textPiece(block.text) : none;
      }
      case 'content_block_delta': {
        const delta = data.delta as Record<string, unknown> | undefined;
        if (delta?.type === 'input_json_delta') {
          const index = typeof data.index === 'number' ? toolBlocks.get(data.index) : undefined;
          const json = delta.partial_json;
          return index !== undefined && typeof json === 'string' && json.length > 0 ? toolPiece({ index, argumentsDelta: json }) : none;
        }
        return delta?.type === 'text_delta' ? textPiece(delta.text) : none;
      }
      case 'message_delta': {
        const delta = data.delta as Record<string, unknown> | undefined;
        if (typeof delta?.stop_reason === 'string') stopReason = delta.stop_reason;
        if (typeof delta?.stop_sequence === 'string') stopSequence = delta.stop_sequence;
        applyUsage(data.usage, true);
        return none;
      }
      case 'message_stop':
        finished = true;
        return none;
      case 'error':
        throw anthropicStreamError(data.error, textStarted);
      default:
        return none;
    }
  };

  const decodeMessage = (message: unknown): AnthropicPiece => {
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
    const toolCalls: ToolCallDelta[] = blocks
      .filter((b) => b?.type === 'tool_use' && typeof b.id === 'string' && typeof b.name === 'string')
      .map((b, index) => ({ index, id: b.id as string, name: b.name as string, argumentsDelta: JSON.stringify(b.input ?? {}) }));
    if (toolCalls.length > 0) textStarted = true;
    if (typeof m.stop_reason === 'string') stopReason = m.stop_reason;
    if (typeof m.stop_sequence === 'string') stopSequence = m.stop_sequence;
    applyUsage(m.usage, true);
    finished = true;
    return { text: body, ...(toolCalls.length > 0 ? { toolCalls } : {}) };
  };

  return {
    decode,
    decodeMessage,
    apply: (event) => decode(event).text,
    applyMessage: (message) => decodeMessage(message).text,
    get stopReason() {
      return stopReason;
    },
    get stopSequence() {
      return stopSequence;
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
      return { ...inputPart, outputTokens: output };
    },
    reportedInput,
  };
}
