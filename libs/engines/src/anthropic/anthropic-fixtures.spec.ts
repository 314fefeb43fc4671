import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { EngineEvent } from '@weir/core';
import { isWeirError } from '@weir/core';
import { collectEngineEvents, engineRequest, type ScriptedUpstream, splitBytes, startScriptedUpstream } from '@weir/testing';
import { createAnthropicEngine } from './anthropic-engine';

/**
 * Recorded-format transcripts (`fixtures/*.sse`, written by hand from docs.anthropic.com
 * "Streaming Messages": message_start, content_block_start, ping, content_block_delta ×N,
 * content_block_stop, message_delta with usage, message_stop; `error` events mid-stream)
 * replayed through the scripted upstream, cut into 13-byte reads (events and UTF-8 characters
 * split) and once with CRLF line ends, and the events the adapter maps them to.
 */
type Expected =
  | { deltas: string[]; end: Extract<EngineEvent, { type: 'end' }> }
  | { deltas: string[]; error: { code: string; retryable: boolean } };

const FIXTURES: Array<[file: string, expected: Expected]> = [
  [
    'end-turn.sse',
    {
      deltas: ['Hello', '! How can I', ' help you today? ☕'],
      end: { type: 'end', reason: 'stop', usage: { inputTokens: 1821, outputTokens: 12, cachedInputTokens: 1800 }, usageSource: 'reported' },
    },
  ],
  [
    'max-tokens.sse',
    {
      deltas: ['Once upon a time', ', in a land'],
      end: { type: 'end', reason: 'length', usage: { inputTokens: 14, outputTokens: 8, cachedInputTokens: 0 }, usageSource: 'reported' },
    },
  ],
  [
    'stop-sequence.sse',
    {
      deltas: ['1. Flour', '\n2. Sugar'],
      // Cache writes are input too: 30 + 2,048. The matched stop sequence is kept (`stop_sequence`).
      end: { type: 'end', reason: 'stop', usage: { inputTokens: 2078, outputTokens: 9, cachedInputTokens: 0, cacheWriteInputTokens: 2048 }, usageSource: 'reported', stopSequence: '\n3.' },
    },
  ],
  [
    'thinking.sse',
    {
      // The thinking block is not output text; its tokens are in output_tokens.
      deltas: ['27 × 453 = ', '12,231'],
      end: { type: 'end', reason: 'stop', usage: { inputTokens: 40, outputTokens: 61, cachedInputTokens: 0 }, usageSource: 'reported' },
    },
  ],
  [
    'refusal.sse',
    {
      deltas: ['I can'],
      end: { type: 'end', reason: 'content_filter', usage: { inputTokens: 18, outputTokens: 2, cachedInputTokens: 0 }, usageSource: 'reported' },
    },
  ],
  ['overloaded-mid-stream.sse', { deltas: ['The capital', ' of France is'], error: { code: 'upstream_error', retryable: false } }],
  ['overloaded-before-output.sse', { deltas: [], error: { code: 'upstream_unavailable', retryable: true } }],
];

const fixture = (file: string): string => readFileSync(path.join(__dirname, 'fixtures', file), 'utf8');

describe('createAnthropicEngine replays recorded fixtures', () => {
  let upstream: ScriptedUpstream;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
  });
  afterAll(() => upstream.close());

  const replay = async (transcript: string): Promise<{ events: EngineEvent[]; error?: unknown }> => {
    const total = Buffer.byteLength(transcript);
    const offsets = Array.from({ length: Math.floor(total / 13) }, (_, i) => (i + 1) * 13);
    upstream.setScript(() => ({ kind: 'sse', steps: splitBytes([transcript], offsets).map((data) => ({ data })) }));
    const engine = createAnthropicEngine({
      kind: 'anthropic',
      baseUrl: upstream.url,
      upstreamModel: 'claude-sonnet-4-5',
      firstTokenTimeoutMs: 2000,
      idleTimeoutMs: 2000,
      maxConcurrency: 2,
    });
    try {
      return await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'Hi' }));
    } finally {
      await engine.close();
    }
  };

  const check = (result: { events: EngineEvent[]; error?: unknown }, expected: Expected): void => {
    const deltas = result.events.filter((e) => e.type === 'delta');
    expect(deltas).toEqual(expected.deltas.map((text) => ({ type: 'delta', text, tokens: 1 })));
    if ('end' in expected) {
      expect(result.error).toBeUndefined();
      expect(result.events).toHaveLength(expected.deltas.length + 1);
      expect(result.events[result.events.length - 1]).toEqual(expected.end);
    } else {
      expect(result.events.some((e) => e.type === 'end')).toBe(false);
      expect(isWeirError(result.error) && { code: result.error.code, retryable: result.error.retryable }).toEqual(expected.error);
    }
  };

  it.each(FIXTURES)('%s', async (file, expected) => {
    check(await replay(fixture(file)), expected);
  });

  it.each(FIXTURES.slice(0, 1))('%s with CRLF line ends', async (file, expected) => {
    check(await replay(fixture(file).replace(/\n/g, '\r\n')), expected);
  });

  it('tool-use.sse: a text block, then a tool_use block streamed as input_json_delta, ends with tool_calls', async () => {
    const { events, error } = await replay(fixture('tool-use.sse'));
    expect(error).toBeUndefined();
    expect(events).toEqual([
      { type: 'delta', text: "Okay, let's check the weather for San Francisco, CA:", tokens: 1 },
      // The block index is 1; the call is the response's first (index 0). The empty partial_json is skipped.
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: '{"location":' }] },
      { type: 'delta', text: '', tokens: 1, toolCalls: [{ index: 0, argumentsDelta: ' "San Francisco, CA", "unit": "fahrenheit"}' }] },
      { type: 'end', reason: 'tool_calls', usage: { inputTokens: 472, outputTokens: 89 }, usageSource: 'reported' },
    ]);
    const args = events.flatMap((e) => (e.type === 'delta' ? (e.toolCalls ?? []) : [])).map((c) => c.argumentsDelta ?? '').join('');
    expect(JSON.parse(args)).toEqual({ location: 'San Francisco, CA', unit: 'fahrenheit' });
  });
});
