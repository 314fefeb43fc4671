import { type EmbeddingItem, type EngineAdapter, type EngineEvent, type EngineRequest, type GenerationInput, WeirError, encodeEmbeddingDelta } from '@weir/core';

/**
 * The scripted engine's vector of an embedding item: 4 dimensions — its length (characters or
 * tokens), the sum of its char codes (or token ids) mod 1,000, 1 and -1 — so tests can predict it.
 */
export function scriptedEmbedding(item: EmbeddingItem): number[] {
  const codes = typeof item === 'string' ? [...item].map((c) => c.codePointAt(0) as number) : item;
  return [codes.length, codes.reduce((a, b) => a + b, 0) % 1_000, 1, -1];
}

/**
 * What a {@link createScriptedEngine} generation does, read from the request's input: the
 * text (or the last chat message) is this object as JSON. Anything else means `{tokens: 4}`.
 */
export interface EngineScript {
  /** Output tokens to produce (one `t<n> ` delta each) before a natural `stop`. */
  tokens: number;
  /** Pause before each token (ms). Default 0. */
  delayMs?: number;
  /** Throw `WeirError('upstream_error')` after this many tokens. */
  failAfter?: number;
  /**
   * Tool calls to make after the text tokens: per call, one delta with its id and name, then
   * its arguments in fragments of `argumentsChunk` characters (default 8), one token each;
   * the generation then ends with `tool_calls`.
   */
  toolCalls?: Array<{ id: string; name: string; arguments: string }>;
  /** Characters per arguments fragment of `toolCalls`. Default 8. */
  argumentsChunk?: number;
}

/** Input tokens the scripted engine reports for every request. */
export const SCRIPTED_INPUT_TOKENS = 7;

/** An engine adapter driven by scripts in its inputs, recording every request. */
export interface ScriptedEngine extends EngineAdapter {
  /** Requests received, without their signal. */
  readonly requests: Array<Omit<EngineRequest, 'signal'>>;
  /** Output tokens produced so far, over all generations. */
  produced(): number;
}

/** Builds the input that makes a {@link createScriptedEngine} follow `script`. */
export function scriptInput(script: EngineScript): GenerationInput {
  return { kind: 'text', text: JSON.stringify(script) };
}

function scriptOf(input: GenerationInput): EngineScript {
  if (input.kind === 'embedding') return { tokens: 0 };
  const text = input.kind === 'text' ? input.text : (input.messages[input.messages.length - 1]?.content ?? '');
  try {
    const parsed = JSON.parse(text) as Partial<EngineScript>;
    if (typeof parsed.tokens === 'number') return parsed as EngineScript;
  } catch {
    // not a script
  }
  return { tokens: 4 };
}

const pause = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/**
 * A hand-written engine for relay tests: produces `t0 `, `t1 `, … (one token each) as its
 * input's {@link EngineScript} says, honours `maxOutputTokens` (`length`) and the abort
 * signal (`aborted`, with the tokens produced so far), and reports exact usage
 * ({@link SCRIPTED_INPUT_TOKENS} input tokens).
 */
export function createScriptedEngine(): ScriptedEngine {
  const requests: Array<Omit<EngineRequest, 'signal'>> = [];
  let produced = 0;
  return {
    kind: 'scripted',
    capacity: { slots: 4, contextTokens: 4096 },
    requests,
    produced: () => produced,
    async countInputTokens() {
      return SCRIPTED_INPUT_TOKENS;
    },
    async *generate(request): AsyncIterable<EngineEvent> {
      const { signal, ...rest } = request;
      requests.push(structuredClone(rest));
      if (request.input.kind === 'embedding') {
        // One vector per item: scriptedEmbedding of its text (or token ids), SCRIPTED_INPUT_TOKENS per item.
        for (const item of request.input.items) {
          if (signal.aborted) break;
          yield { type: 'delta', text: encodeEmbeddingDelta(scriptedEmbedding(item)), tokens: 0 };
        }
        yield { type: 'end', reason: signal.aborted ? 'aborted' : 'stop', usage: { inputTokens: SCRIPTED_INPUT_TOKENS * request.input.items.length, outputTokens: 0 }, usageSource: 'reported' };
        return;
      }
      const script = scriptOf(request.input);
      const limit = Math.min(script.tokens, request.maxOutputTokens);
      let n = 0;
      while (n < limit && !signal.aborted) {
        if (script.failAfter !== undefined && n >= script.failAfter) throw new WeirError('upstream_error', 'the scripted upstream failed');
        await pause(script.delayMs ?? 0, signal);
        if (signal.aborted) break;
        n++;
        produced++;
        yield { type: 'delta', text: `t${n - 1} `, tokens: 1 };
      }
      const calls = n >= limit && !signal.aborted ? (script.toolCalls ?? []) : [];
      const step = Math.max(1, script.argumentsChunk ?? 8);
      for (const [index, call] of calls.entries()) {
        n++;
        produced++;
        yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index, id: call.id, name: call.name, argumentsDelta: '' }] };
        for (let at = 0; at < call.arguments.length; at += step) {
          n++;
          produced++;
          yield { type: 'delta', text: '', tokens: 1, toolCalls: [{ index, argumentsDelta: call.arguments.slice(at, at + step) }] };
        }
      }
      const reason = signal.aborted ? 'aborted' : script.tokens > request.maxOutputTokens ? 'length' : calls.length > 0 ? 'tool_calls' : 'stop';
      yield { type: 'end', reason, usage: { inputTokens: SCRIPTED_INPUT_TOKENS, outputTokens: n }, usageSource: 'reported' };
    },
    async close() {},
  };
}
