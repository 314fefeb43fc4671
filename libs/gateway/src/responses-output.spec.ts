/**
 * The items and events of one Responses answer (`responses-output.ts`), fed deltas as the
 * transcript holds them: the orders the gateway specs do not reach through a scripted upstream.
 */
import { createResponsesOutput, type ResponsesOutputEvent } from './responses-output';

const ids = { messageId: 'msg_1', stem: '1' };
/** `type@output_index` of each event. */
const shape = (events: ResponsesOutputEvent[]) => events.map((e) => `${e.type.replace('response.', '')}${typeof e.fields.output_index === 'number' ? `@${e.fields.output_index}` : ''}`);

describe('createResponsesOutput', () => {
  it('an answer with nothing in it is one empty, completed message', () => {
    const out = createResponsesOutput(ids);
    expect(out.delta('', [])).toEqual([]);
    expect(shape(out.finish('completed'))).toEqual(['output_item.added@0', 'content_part.added@0', 'output_text.done@0', 'content_part.done@0', 'output_item.done@0']);
    expect(out.items()).toEqual([{ id: 'msg_1', type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: '', annotations: [], logprobs: [] }] }]);
  });

  it('reasoning only still gets its (empty) message; text() is the message text only', () => {
    const out = createResponsesOutput(ids);
    out.delta('', undefined, 'hmm');
    out.finish('completed');
    expect(out.items().map((i) => [i.type, i.id])).toEqual([
      ['reasoning', 'rs_1_0'],
      ['message', 'msg_1'],
    ]);
    expect(out.text()).toBe('');
  });

  it('text after a call opens a second message (its own id); the call is closed first', () => {
    const out = createResponsesOutput(ids);
    const events = [...out.delta('A'), ...out.delta('', [{ index: 0, id: 'call_x', name: 'f', argumentsDelta: '{}' }]), ...out.delta('B'), ...out.finish('completed')];
    expect(shape(events)).toEqual([
      'output_item.added@0',
      'content_part.added@0',
      'output_text.delta@0',
      'output_text.done@0',
      'content_part.done@0',
      'output_item.done@0',
      'output_item.added@1',
      'function_call_arguments.delta@1',
      'function_call_arguments.done@1',
      'output_item.done@1',
      'output_item.added@2',
      'content_part.added@2',
      'output_text.delta@2',
      'output_text.done@2',
      'content_part.done@2',
      'output_item.done@2',
    ]);
    expect(out.items().map((i) => i.id)).toEqual(['msg_1', 'fc_1_0', 'msg_1_1']);
    expect(out.text()).toBe('AB');
  });

  it('interleaved fragments of parallel calls all land in their call: the final items hold the whole arguments', () => {
    const out = createResponsesOutput(ids);
    out.delta('', [{ index: 0, id: 'call_a', name: 'f', argumentsDelta: '{"a":' }]);
    out.delta('', [{ index: 1, id: 'call_b', name: 'g', argumentsDelta: '{"b":' }]);
    // A late fragment of the closed call 0: no event (its item is done), but kept.
    expect(out.delta('', [{ index: 0, argumentsDelta: '1}' }])).toEqual([]);
    out.delta('', [{ index: 1, argumentsDelta: '2}' }]);
    out.finish('completed');
    expect(out.items()).toEqual([
      { id: 'fc_1_0', type: 'function_call', status: 'completed', call_id: 'call_a', name: 'f', arguments: '{"a":1}' },
      { id: 'fc_1_1', type: 'function_call', status: 'completed', call_id: 'call_b', name: 'g', arguments: '{"b":2}' },
    ]);
  });

  it('a call without an upstream id gets one; a cut answer leaves its open item incomplete', () => {
    const out = createResponsesOutput(ids);
    const added = out.delta('', [{ index: 0, name: 'f' }]);
    expect(added[0].fields.item).toMatchObject({ call_id: 'call_1_0', name: 'f', arguments: '', status: 'in_progress' });
    out.delta('', [{ index: 0, argumentsDelta: '{"x' }]);
    const done = out.finish('incomplete');
    expect(done.at(-1)?.fields.item).toMatchObject({ status: 'incomplete', arguments: '{"x' });
  });
});
