import { type MessageInitShape, create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { relayV1 } from '@weir/proto';
import { decodeGenerateResponse, encodeGenerateResponse, plainDelta } from './generate-codec';

const texts = ['', 'a', 'hello world', 'héllo ✓ 日本語 🎉', 'x'.repeat(200), 'y'.repeat(20_000)];
const tokenCounts = [0, 1, 127, 128, 300, 16_384, 2 ** 31, 2 ** 32 - 1];

function response(event: MessageInitShape<typeof relayV1.GenerateResponseSchema>['event']): relayV1.GenerateResponse {
  return create(relayV1.GenerateResponseSchema, { event });
}

function expectSameAsProtobufEs(message: relayV1.GenerateResponse) {
  const reference = Buffer.from(toBinary(relayV1.GenerateResponseSchema, message));
  const mine = encodeGenerateResponse(message);
  expect(mine.equals(reference)).toBe(true);
  expect(decodeGenerateResponse(reference)).toEqual(fromBinary(relayV1.GenerateResponseSchema, reference));
}

describe('GenerateResponse codec', () => {
  it('writes a single delta byte for byte as protobuf-es, and reads it back the same', () => {
    for (const text of texts) for (const tokens of tokenCounts) expectSameAsProtobufEs(response({ case: 'delta', value: plainDelta(text, tokens) }));
  });

  it('writes a turn of deltas byte for byte as protobuf-es, in order, empty ones included', () => {
    const deltas = texts.flatMap((t, i) => [plainDelta(t, tokenCounts[i % tokenCounts.length]), plainDelta('', 0)]);
    expectSameAsProtobufEs(response({ case: 'deltas', value: { deltas } }));
    expectSameAsProtobufEs(response({ case: 'deltas', value: { deltas: [] } }));
    const decoded = decodeGenerateResponse(encodeGenerateResponse(response({ case: 'deltas', value: { deltas } })));
    expect(decoded.event.case === 'deltas' && decoded.event.value.deltas.map((d) => d.text)).toEqual(deltas.map((d) => d.text));
  });

  it('leaves tool-call fragments, the end and unknown fields to protobuf-es (same results)', () => {
    const withTools = create(relayV1.DeltaSchema, { text: '', tokens: 1, toolCalls: [{ index: 0, id: 'call_1', name: 'f', argumentsDelta: '{"a"' }] });
    expectSameAsProtobufEs(response({ case: 'delta', value: withTools }));
    expectSameAsProtobufEs(response({ case: 'deltas', value: { deltas: [plainDelta('a', 1), withTools] } }));
    expectSameAsProtobufEs(response({ case: 'end', value: { outcome: { finishReason: 1, modelRevision: 'r@1' } } }));
    expectSameAsProtobufEs(response({ case: undefined }));
    // A delta with an unknown field 9 (a newer relay): decoded by protobuf-es, the field kept.
    const known = encodeGenerateResponse(response({ case: 'delta', value: plainDelta('hi', 2) }));
    const body = Buffer.concat([known.subarray(2), Buffer.from([0x48, 0x05])]);
    const withUnknown = Buffer.concat([Buffer.from([0x0a, body.length]), body]);
    expect(decodeGenerateResponse(withUnknown)).toEqual(fromBinary(relayV1.GenerateResponseSchema, withUnknown));
  });

  it('leaves reasoning to protobuf-es: it crosses the wire whole, alone or beside text and plain deltas', () => {
    const thought = create(relayV1.DeltaSchema, { text: '', tokens: 1, reasoning: 'Let me think… 🤔' });
    const both = create(relayV1.DeltaSchema, { text: 'Hi', tokens: 1, reasoning: 'ok' });
    for (const message of [response({ case: 'delta', value: thought }), response({ case: 'deltas', value: { deltas: [plainDelta('a', 1), thought, both] } })]) {
      expectSameAsProtobufEs(message);
      expect(decodeGenerateResponse(encodeGenerateResponse(message))).toEqual(fromBinary(relayV1.GenerateResponseSchema, toBinary(relayV1.GenerateResponseSchema, message)));
    }
    const decoded = decodeGenerateResponse(encodeGenerateResponse(response({ case: 'deltas', value: { deltas: [plainDelta('a', 1), thought, both] } })));
    expect(decoded.event.case === 'deltas' && decoded.event.value.deltas.map((d) => [d.text, d.reasoning])).toEqual([['a', undefined], ['', 'Let me think… 🤔'], ['Hi', 'ok']]);
  });

  it('rejects malformed bytes as protobuf-es does', () => {
    const whole = encodeGenerateResponse(response({ case: 'delta', value: plainDelta('hello', 3) }));
    const truncated = whole.subarray(0, whole.length - 2);
    expect(() => fromBinary(relayV1.GenerateResponseSchema, truncated)).toThrow();
    expect(() => decodeGenerateResponse(truncated)).toThrow();
  });
});
