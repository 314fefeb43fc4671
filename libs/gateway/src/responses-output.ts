/**
 * The output items of one OpenAI Responses answer (`POST /v1/responses`, OpenAI's shape), built
 * from the generation's deltas — text and tool-call fragments, as every engine streams them —
 * together with the stream events that build the same items on the client. The route feeds it
 * the transcript: streamed, it writes the events; not streamed, it keeps only the items. So
 * the object a client assembles with the official SDK's `stream(...).finalResponse()` and the
 * one `create` returns are built by one piece of code.
 *
 * Items appear in the order the model produced them, as OpenAI streams them:
 * - reasoning (an upstream's `reasoning_content`) opens a `reasoning` item (`rs_…`, empty
 *   `summary`, its text as one `reasoning_text` content part): `response.output_item.added`,
 *   `response.content_part.added`, then `response.reasoning_text.delta` per piece;
 * - text opens a `message` item: `response.output_item.added`, `response.content_part.added`,
 *   then `response.output_text.delta` per piece;
 * - a tool call's first fragment opens a `function_call` item (`response.output_item.added`
 *   with its `call_id` and `name`), each arguments fragment is a
 *   `response.function_call_arguments.delta`;
 * - a new item closes the one before it: a message (reasoning) with `response.output_text.done`
 *   (`response.reasoning_text.done`), `response.content_part.done`, `response.output_item.done`; a call with
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

/** One `reasoning_text` content part of a reasoning item. */
function reasoningText(text: string): Record<string, unknown> {
  return { type: 'reasoning_text', text };
}

/** One stream event before numbering: its `type` and fields (`responsesEvents` adds `sequence_number`). */
export interface ResponsesOutputEvent {
  type: string;
  fields: Record<string, unknown>;
}

/** The ids of one answer's items. */
export interface ResponsesOutputIds {
  /** The first message item's id (`msg_…`); later message items get `_1`, `_2`, … appended. */
  messageId: string;
  /** The stem of function call and reasoning item ids: call `i` (0-based, in order of appearance) is `fc_<stem>_<i>`, reasoning item `i` is `rs_<stem>_<i>`. */
  stem: string;
}

/** Builds the items and events of one answer (see the module comment). */
export interface ResponsesOutput {
  /** The events one delta causes: reasoning, text, tool-call fragments (in that order), any of them. */
  delta(text: string, calls?: readonly ToolCallDelta[], reasoning?: string): ResponsesOutputEvent[];
  /** Closes the open item with `status` (and makes the empty message of an answer without output); the events to send. */
  finish(status: 'completed' | 'incomplete'): ResponsesOutputEvent[];
  /** The items so far, in output order (final after `finish`). */
  items(): Record<string, unknown>[];
  /** The text of every message item, joined (what a JSON Schema `text.format` is checked against; reasoning is not part of it). */
  text(): string;
}

/** A message or reasoning item: its text so far. */
interface TextItem {
  kind: 'message' | 'reasoning';
  id: string;
  text: string;
  status: FunctionCallStatus;
}
/** A function call item; `upstreamIndex` is the engine's index of the call. */
interface CallItem {
  kind: 'call';
  id: string;
  callId: string;
  name: string;
  arguments: string;
  status: FunctionCallStatus;
  upstreamIndex: number;
}
type Item = TextItem | CallItem;

/** Creates a {@link ResponsesOutput} with no items yet. */
export function createResponsesOutput(ids: ResponsesOutputIds): ResponsesOutput {
  const items: Item[] = [];
  /** Position of the open item in `items`; -1 when none is open. */
  let open = -1;
  let messages = 0;
  let calls = 0;
  let thoughts = 0;

  const messageItem = (m: TextItem) => ({
    id: m.id,
    type: 'message',
    status: m.status,
    role: 'assistant',
    content: m.status === 'in_progress' && m.text === '' ? [] : [outputText(m.text)],
  });
  const reasoningItem = (r: TextItem) => ({
    id: r.id,
    type: 'reasoning',
    status: r.status,
    summary: [],
    content: r.status === 'in_progress' && r.text === '' ? [] : [reasoningText(r.text)],
  });
  const toWire = (item: Item) => (item.kind === 'call' ? functionCallItem(item, item.status) : item.kind === 'message' ? messageItem(item) : reasoningItem(item));

  const close = (status: FunctionCallStatus, out: ResponsesOutputEvent[]) => {
    if (open < 0) return;
    const item = items[open];
    const at = { item_id: item.id, output_index: open };
    item.status = status;
    if (item.kind === 'call') {
      out.push({ type: 'response.function_call_arguments.done', fields: { ...at, name: item.name, arguments: item.arguments } });
    } else if (item.kind === 'message') {
      out.push({ type: 'response.output_text.done', fields: { ...at, content_index: 0, text: item.text, logprobs: [] } });
      out.push({ type: 'response.content_part.done', fields: { ...at, content_index: 0, part: outputText(item.text) } });
    } else {
      out.push({ type: 'response.reasoning_text.done', fields: { ...at, content_index: 0, text: item.text } });
      out.push({ type: 'response.content_part.done', fields: { ...at, content_index: 0, part: reasoningText(item.text) } });
    }
    out.push({ type: 'response.output_item.done', fields: { output_index: open, item: toWire(item) } });
    open = -1;
  };

  const openText = (kind: 'message' | 'reasoning', out: ResponsesOutputEvent[]) => {
    close('completed', out);
    const id = kind === 'reasoning' ? `rs_${ids.stem}_${thoughts++}` : messages === 0 ? ids.messageId : `${ids.messageId}_${messages}`;
    if (kind === 'message') messages++;
    const m: Item = { kind, id, text: '', status: 'in_progress' };
    open = items.push(m) - 1;
    out.push({ type: 'response.output_item.added', fields: { output_index: open, item: toWire(m) } });
    out.push({ type: 'response.content_part.added', fields: { item_id: m.id, output_index: open, content_index: 0, part: kind === 'reasoning' ? reasoningText('') : outputText('') } });
  };
  const openMessage = (out: ResponsesOutputEvent[]) => openText('message', out);

  return {
    delta(text, fragments, reasoning) {
      const out: ResponsesOutputEvent[] = [];
      if (reasoning !== undefined && reasoning !== '') {
        if (open < 0 || items[open].kind !== 'reasoning') openText('reasoning', out);
        const r = items[open] as TextItem;
        r.text += reasoning;
        out.push({ type: 'response.reasoning_text.delta', fields: { item_id: r.id, output_index: open, content_index: 0, delta: reasoning } });
      }
      if (text !== '') {
        if (open < 0 || items[open].kind !== 'message') openMessage(out);
        const m = items[open] as TextItem;
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
        const call = items[at] as CallItem;
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
      // An answer of no text and no call (nothing at all, or reasoning only) still has its message, as OpenAI's do.
      if (!items.some((i) => i.kind !== 'reasoning')) openMessage(out);
      close(status, out);
      return out;
    },
    items: () => items.map(toWire),
    text: () => items.map((i) => (i.kind === 'message' ? i.text : '')).join(''),
  };
}
