/**
 * The output items of one OpenAI Responses answer (`POST /v1/responses`, OpenAI's shape), built
 * from the generation's deltas — text and tool-call fragments, as every engine streams them —
 * together with the stream events that build the same items on the client. The route feeds it
 * the transcript: streamed, it writes the events; not streamed, it keeps only the items. So
 * the object a client assembles with the official SDK's `stream(...).finalResponse()` and the
 * one `create` returns are built by one piece of code.
 *
 * Items appear in the order the model produced them, as OpenAI streams them:
 * - text opens a `message` item: `response.output_item.added`, `response.content_part.added`,
 *   then `response.output_text.delta` per piece;
 * - a tool call's first fragment opens a `function_call` item (`response.output_item.added`
 *   with its `call_id` and `name`), each arguments fragment is a
 *   `response.function_call_arguments.delta`;
 * - a new item closes the one before it: a message with `response.output_text.done`,
 *   `response.content_part.done`, `response.output_item.done`; a call with
 *   `response.function_call_arguments.done` (arguments and name) and `response.output_item.done`;
 * - `finish` closes the last one. An answer with no output at all is one empty message.
 *
 * An upstream that interleaves the fragments of parallel calls (OpenAI and the engines Weir
 * knows send them one call after the other) still gets every fragment into its call's item:
 * a fragment for a call already closed is appended to it, and the final `Response` (in
 * `response.completed`, which the SDK's snapshot takes whole) carries the whole arguments.
 */
import type { ToolCallDelta } from '@weir/core';
import { type FunctionCallStatus, functionCallItem, outputText } from '@weir/streaming';

/** One stream event before numbering: its `type` and fields (`responsesEvents` adds `sequence_number`). */
export interface ResponsesOutputEvent {
  type: string;
  fields: Record<string, unknown>;
}

/** The ids of one answer's items. */
export interface ResponsesOutputIds {
  /** The first message item's id (`msg_…`); later message items get `_1`, `_2`, … appended. */
  messageId: string;
  /** The stem of function call item ids: call `i` (0-based, in order of appearance) is `fc_<stem>_<i>`. */
  stem: string;
}

/** Builds the items and events of one answer (see the module comment). */
export interface ResponsesOutput {
  /** The events one delta causes: text, tool-call fragments (in that order), or both. */
  delta(text: string, calls?: readonly ToolCallDelta[]): ResponsesOutputEvent[];
  /** Closes the open item with `status` (and makes the empty message of an answer without output); the events to send. */
  finish(status: 'completed' | 'incomplete'): ResponsesOutputEvent[];
  /** The items so far, in output order (final after `finish`). */
  items(): Record<string, unknown>[];
  /** The text of every message item, joined (what a JSON Schema `text.format` is checked against). */
  text(): string;
}

type Item =
  | { kind: 'message'; id: string; text: string; status: FunctionCallStatus }
  | { kind: 'call'; id: string; callId: string; name: string; arguments: string; status: FunctionCallStatus; upstreamIndex: number };

/** Creates a {@link ResponsesOutput} with no items yet. */
export function createResponsesOutput(ids: ResponsesOutputIds): ResponsesOutput {
  const items: Item[] = [];
  /** Position of the open item in `items`; -1 when none is open. */
  let open = -1;
  let messages = 0;
  let calls = 0;

  const messageItem = (m: Extract<Item, { kind: 'message' }>) => ({
    id: m.id,
    type: 'message',
    status: m.status,
    role: 'assistant',
    content: m.status === 'in_progress' && m.text === '' ? [] : [outputText(m.text)],
  });
  const toWire = (item: Item) => (item.kind === 'message' ? messageItem(item) : functionCallItem(item, item.status));

  const close = (status: FunctionCallStatus, out: ResponsesOutputEvent[]) => {
    if (open < 0) return;
    const item = items[open];
    const at = { item_id: item.id, output_index: open };
    item.status = status;
    if (item.kind === 'message') {
      out.push({ type: 'response.output_text.done', fields: { ...at, content_index: 0, text: item.text, logprobs: [] } });
      out.push({ type: 'response.content_part.done', fields: { ...at, content_index: 0, part: outputText(item.text) } });
    } else {
      out.push({ type: 'response.function_call_arguments.done', fields: { ...at, name: item.name, arguments: item.arguments } });
    }
    out.push({ type: 'response.output_item.done', fields: { output_index: open, item: toWire(item) } });
    open = -1;
  };

  const openMessage = (out: ResponsesOutputEvent[]) => {
    close('completed', out);
    const m: Item = { kind: 'message', id: messages === 0 ? ids.messageId : `${ids.messageId}_${messages}`, text: '', status: 'in_progress' };
    messages++;
    open = items.push(m) - 1;
    out.push({ type: 'response.output_item.added', fields: { output_index: open, item: toWire(m) } });
    out.push({ type: 'response.content_part.added', fields: { item_id: m.id, output_index: open, content_index: 0, part: outputText('') } });
  };

  return {
    delta(text, fragments) {
      const out: ResponsesOutputEvent[] = [];
      if (text !== '') {
        if (open < 0 || items[open].kind !== 'message') openMessage(out);
        const m = items[open] as Extract<Item, { kind: 'message' }>;
        m.text += text;
        out.push({ type: 'response.output_text.delta', fields: { item_id: m.id, output_index: open, content_index: 0, delta: text, logprobs: [] } });
      }
      for (const f of fragments ?? []) {
        let at = items.findIndex((i) => i.kind === 'call' && i.upstreamIndex === f.index);
        if (at < 0) {
          close('completed', out);
          const n = calls++;
          const call: Item = { kind: 'call', id: `fc_${ids.stem}_${n}`, callId: f.id ?? `call_${ids.stem}_${n}`, name: f.name ?? '', arguments: '', status: 'in_progress', upstreamIndex: f.index };
          at = open = items.push(call) - 1;
          out.push({ type: 'response.output_item.added', fields: { output_index: at, item: toWire(call) } });
        }
        const call = items[at] as Extract<Item, { kind: 'call' }>;
        // A later fragment's id or name replaces the first's, as chat completions reads them (`accumulateToolCalls`).
        if (f.id !== undefined) call.callId = f.id;
        if (f.name !== undefined) call.name = f.name;
        if (f.argumentsDelta === undefined || f.argumentsDelta === '') continue;
        call.arguments += f.argumentsDelta;
        // A fragment for a call already closed (interleaved upstream) is kept for the final response only.
        if (at === open) out.push({ type: 'response.function_call_arguments.delta', fields: { item_id: call.id, output_index: at, delta: f.argumentsDelta } });
      }
      return out;
    },
    finish(status) {
      const out: ResponsesOutputEvent[] = [];
      if (items.length === 0) openMessage(out);
      close(status, out);
      return out;
    },
    items: () => items.map(toWire),
    text: () => items.map((i) => (i.kind === 'message' ? i.text : '')).join(''),
  };
}
