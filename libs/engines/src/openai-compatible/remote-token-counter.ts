/**
 * Counts prompt tokens by asking a replica that has the revision's tokenizer
 * (`POST {replica}/tokenize` `{input}` → `{input_tokens}`, served by `apps/engine-llamacpp`),
 * so a process without the model (the split gateway) checks context limits and reserves with
 * the model's own count. When no replica answers within the timeout, it falls back to the
 * documented upper bound ({@link countInputWith} with {@link utf8TokenUpperBound}), which may
 * over-reserve but never under-reserves.
 */
import type { GenerationInput } from '@weir/core';
import { type Dispatcher, request } from 'undici';
import { egressDispatcher } from '../egress-dispatcher';
import { countInputWith, utf8TokenUpperBound } from './token-bound';

/** Options of {@link createRemoteTokenCounter}. */
export interface RemoteTokenCounterOptions {
  /** Replica base URLs including `/v1` (the tokenize route is beside `/v1`). Tried in turn. */
  baseUrls: readonly string[];
  /** Per-attempt timeout (ms). Default 1,000. */
  timeoutMs?: number;
  /** The undici dispatcher (the mutual-TLS agent when replicas serve HTTPS). Default: the guarded egress pool. */
  dispatcher?: Dispatcher;
}

/** Counts an input's prompt tokens; with `limit` it may stop once past it (see `EngineAdapter.countInputTokens`). */
export type TokenCounter = (input: GenerationInput, limit?: number) => Promise<number>;

/** Creates the counter. Never throws: the upper bound is the last resort. */
export function createRemoteTokenCounter(options: RemoteTokenCounterOptions): TokenCounter {
  const timeoutMs = options.timeoutMs ?? 1_000;
  const endpoints = options.baseUrls.map((u) => `${u.replace(/\/v1\/?$/, '')}/tokenize`);
  let next = 0;
  const counter: TokenCounter = async (input, limit) => {
    if (input.kind === 'embedding') {
      // Each item counted on its own (a token array is its own count).
      let sum = 0;
      for (const item of input.items) sum += typeof item === 'string' ? await counter({ kind: 'text', text: item }, limit) : item.length;
      return sum;
    }
    const body = JSON.stringify({ input: input.kind === 'text' ? input.text : input.messages.map((m) => ({ role: m.role, content: m.content })) });
    for (let i = 0; i < endpoints.length; i++) {
      const url = endpoints[(next + i) % endpoints.length];
      try {
        const res = await request(url, {
          // The mutual-TLS agent for Weir's own replicas, else the guarded pool: no connection to a
          // link-local / metadata address (egress-dispatcher.ts).
          dispatcher: options.dispatcher ?? egressDispatcher(),
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
        });
        const json = (await res.body.json()) as { input_tokens?: unknown };
        if (res.statusCode === 200 && typeof json.input_tokens === 'number') {
          next = (next + i + 1) % endpoints.length;
          return json.input_tokens;
        }
      } catch {
        // try the next replica
      }
    }
    return countInputWith(input, utf8TokenUpperBound);
  };
  return counter;
}
