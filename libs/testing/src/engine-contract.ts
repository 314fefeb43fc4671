import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput, TokenUsage, WeirErrorCode } from '@weir/core';
import { isWeirError } from '@weir/core';
import { freePort } from './paths';
import {
  chatStreamEvents,
  type ScriptedUpstream,
  splitBytes,
  sseEvent,
  sseReply,
  startScriptedUpstream,
  type UpstreamReply,
} from './scripted-upstream';

/** What {@link describeEngineContract} needs to exercise one adapter. */
export interface EngineContractHarness {
  /** The adapter under test; it must answer `input` with at least 4 output tokens. */
  adapter: EngineAdapter;
  /** A prompt the adapter answers normally. Default: text `Once upon a time`. */
  input?: GenerationInput;
  /**
   * An adapter producing at least 50 tokens at ≥ 2 ms per token for `input`, so an abort lands
   * mid-stream. Default: `adapter`.
   */
  slowAdapter?: EngineAdapter;
  /** An input `adapter` must reject (e.g. longer than its context). */
  oversizedInput: GenerationInput;
  /** Codes accepted for `oversizedInput`. Default `context_length_exceeded`, `upstream_bad_request`. */
  oversizedCodes?: WeirErrorCode[];
  /** Further faults: an adapter (e.g. on a failing upstream) and the code it must throw. */
  faults?: Array<{ name: string; adapter: EngineAdapter; code: WeirErrorCode }>;
  /** Releases what setup created (adapters are closed by the suite). */
  close?: () => Promise<void>;
}

/** Collects a generation's events; the error (if thrown) is returned, not thrown. */
export async function collectEngineEvents(
  adapter: EngineAdapter,
  request: EngineRequest,
  onEvent?: (event: EngineEvent, index: number) => void,
): Promise<{ events: EngineEvent[]; error?: unknown }> {
  const events: EngineEvent[] = [];
  try {
    for await (const event of adapter.generate(request)) {
      events.push(event);
      onEvent?.(event, events.length - 1);
    }
    return { events };
  } catch (error) {
    return { events, error };
  }
}

/** Builds an {@link EngineRequest} with greedy sampling and a fresh signal. */
export function engineRequest(input: GenerationInput, overrides: Partial<EngineRequest> = {}): EngineRequest {
  return {
    input,
    maxOutputTokens: 16,
    sampling: { temperature: 0 },
    signal: new AbortController().signal,
    generationId: `gen_contract_${Math.random().toString(36).slice(2, 10)}`,
    ...overrides,
  };
}

/**
 * The one contract every engine adapter passes (a jest `describe` block):
 * - a generation yields `delta`s then exactly one `end`, last;
 * - usage is positive and consistent (Σ delta tokens ≤ output tokens; `countInputTokens` ≥
 *   reported input tokens, since it is exact or an upper bound);
 * - `maxOutputTokens` is honoured (`length`, output ≤ limit);
 * - an abort mid-stream ends with `aborted` and the tokens counted so far, promptly;
 * - an already-aborted signal ends with `aborted` without throwing;
 * - bad requests and failing upstreams throw `WeirError`s with the expected codes.
 *
 * `setup` runs once (beforeAll); adapters it returns are closed afterwards.
 */
export function describeEngineContract(name: string, setup: () => Promise<EngineContractHarness>): void {
  describe(`engine contract: ${name}`, () => {
    let h: EngineContractHarness;
    const input = (): GenerationInput => h.input ?? { kind: 'text', text: 'Once upon a time' };

    beforeAll(async () => {
      h = await setup();
    });
    afterAll(async () => {
      if (!h) return;
      const adapters = new Set([h.adapter, h.slowAdapter, ...(h.faults ?? []).map((f) => f.adapter)]);
      for (const a of adapters) await a?.close();
      await h.close?.();
    });

    it('yields deltas then exactly one end, last', async () => {
      const { events, error } = await collectEngineEvents(h.adapter, engineRequest(input(), { maxOutputTokens: 8 }));
      expect(error).toBeUndefined();
      const ends = events.filter((e) => e.type === 'end');
      expect(ends).toHaveLength(1);
      expect(events[events.length - 1].type).toBe('end');
      const text = events.map((e) => (e.type === 'delta' ? e.text : '')).join('');
      expect(text.length).toBeGreaterThan(0);
      const end = ends[0];
      expect(end.type === 'end' && ['stop', 'length'].includes(end.reason)).toBe(true);
    });

    it('reports positive, consistent usage', async () => {
      const request = engineRequest(input(), { maxOutputTokens: 8 });
      const { events, error } = await collectEngineEvents(h.adapter, request);
      expect(error).toBeUndefined();
      const end = events[events.length - 1];
      if (end.type !== 'end') throw new Error('no end event');
      const deltaTokens = events.reduce((n, e) => n + (e.type === 'delta' ? e.tokens : 0), 0);
      expect(end.usage.inputTokens).toBeGreaterThan(0);
      expect(end.usage.outputTokens).toBeGreaterThan(0);
      expect(deltaTokens).toBeLessThanOrEqual(end.usage.outputTokens);
      expect(await h.adapter.countInputTokens(request.input)).toBeGreaterThanOrEqual(end.usage.inputTokens);
    });

    it('honours maxOutputTokens', async () => {
      const { events, error } = await collectEngineEvents(h.adapter, engineRequest(input(), { maxOutputTokens: 3 }));
      expect(error).toBeUndefined();
      const end = events[events.length - 1];
      if (end.type !== 'end') throw new Error('no end event');
      expect(end.reason).toBe('length');
      expect(end.usage.outputTokens).toBeLessThanOrEqual(3);
      expect(events.filter((e) => e.type === 'delta').length).toBeLessThanOrEqual(3);
    });

    it('ends with aborted and counted tokens when aborted mid-stream', async () => {
      const adapter = h.slowAdapter ?? h.adapter;
      const controller = new AbortController();
      let abortedAt = 0;
      const { events, error } = await collectEngineEvents(
        adapter,
        engineRequest(input(), { maxOutputTokens: 400, signal: controller.signal }),
        (event) => {
          if (event.type === 'delta' && event.tokens > 0 && abortedAt === 0) {
            abortedAt = performance.now();
            controller.abort();
          }
        },
      );
      const endedAt = performance.now();
      expect(error).toBeUndefined();
      const end = events[events.length - 1];
      if (end.type !== 'end') throw new Error('no end event');
      expect(end.reason).toBe('aborted');
      const deltaTokens = events.reduce((n, e) => n + (e.type === 'delta' ? e.tokens : 0), 0);
      expect(deltaTokens).toBeGreaterThan(0);
      expect(end.usage.outputTokens).toBeGreaterThanOrEqual(deltaTokens);
      expect(end.usage.outputTokens).toBeLessThan(400);
      expect(endedAt - abortedAt).toBeLessThan(1000);
    });

    it('ends with aborted when the signal is already aborted', async () => {
      const controller = new AbortController();
      controller.abort();
      const { events, error } = await collectEngineEvents(h.adapter, engineRequest(input(), { signal: controller.signal }));
      expect(error).toBeUndefined();
      const end = events[events.length - 1];
      expect(end?.type === 'end' && end.reason).toBe('aborted');
    });

    it('rejects an oversized input with a WeirError', async () => {
      const { error } = await collectEngineEvents(h.adapter, engineRequest(h.oversizedInput));
      expect(isWeirError(error)).toBe(true);
      const codes = h.oversizedCodes ?? ['context_length_exceeded', 'upstream_bad_request'];
      expect(codes).toContain(isWeirError(error) ? error.code : undefined);
    });

    it('maps faults to WeirError codes', async () => {
      for (const fault of h.faults ?? []) {
        const { error } = await collectEngineEvents(fault.adapter, engineRequest(input()));
        expect({ fault: fault.name, code: isWeirError(error) ? error.code : String(error) }).toEqual({
          fault: fault.name,
          code: fault.code,
        });
      }
    });
  });
}

/** How a scripted upstream ends a stream, in Weir's terms (the wire translates it). */
export interface UpstreamEnd {
  /** Weir's end reason; the wire sends the provider's equivalent stop/finish reason. */
  reason: 'stop' | 'length' | 'content_filter';
  /** The counts the upstream reports, in Weir's terms (`inputTokens` includes cached tokens). */
  usage: TokenUsage;
}

/**
 * One provider's wire format, for {@link describeUpstreamEngineContract}: it renders the
 * contract's scenarios as that provider's SSE events and error bodies, so one suite runs
 * against every HTTP upstream adapter (TensorZero-style: one set of scenarios per provider).
 */
export interface UpstreamWire {
  /** Provider name, for test titles. */
  readonly name: string;
  /** The path the adapter must `POST` to on the scripted upstream, e.g. `/v1/messages`. */
  readonly path: string;
  /**
   * SSE events (one string each) of a streamed answer made of `pieces`, one text delta each.
   * Without `end`, the events stop after the text (no finish, usage or terminator): a stream
   * still running, or one about to fail.
   */
  streamEvents(pieces: string[], end?: UpstreamEnd): string[];
  /** One in-band error event (overloaded or server error) carrying `message`. */
  errorEvent(message: string): string;
  /** An HTTP error reply with the provider's error body, carrying `message`. */
  errorReply(status: number, message: string): UpstreamReply;
}

/** What {@link describeUpstreamEngineContract} needs to exercise one HTTP upstream adapter. */
export interface UpstreamContractHarness {
  wire: UpstreamWire;
  /**
   * Creates the adapter for an upstream at `url` (a scripted upstream's `url`, which ends in
   * `/v1`; for connection failures, a URL on a closed port). First-token and idle timeouts
   * should be at least 2 s so they never fire here.
   */
  createAdapter(url: string): EngineAdapter;
  /** The prompt sent in every scenario. Default: chat, one user message `Say hi`. */
  input?: GenerationInput;
}

/**
 * How every HTTP upstream adapter maps an upstream's HTTP error status (the table of
 * `libs/engines/src/openai-compatible/upstream-errors.ts`): a request the upstream refuses is
 * `upstream_bad_request`; a rejected credential is Weir's misconfiguration, `upstream_error`;
 * rate limits, server errors and overload (Anthropic's 529) are `upstream_unavailable`,
 * retryable.
 */
export const UPSTREAM_STATUS_CONTRACT: ReadonlyArray<{ status: number; code: WeirErrorCode; retryable: boolean }> = [
  { status: 400, code: 'upstream_bad_request', retryable: false },
  { status: 401, code: 'upstream_error', retryable: false },
  { status: 403, code: 'upstream_error', retryable: false },
  { status: 429, code: 'upstream_unavailable', retryable: true },
  { status: 500, code: 'upstream_unavailable', retryable: true },
  { status: 529, code: 'upstream_unavailable', retryable: true },
];

/** Upstream error text the suite plants: it must reach `cause` only, never a public message. */
const PLANTED_UPSTREAM_MESSAGE = 'upstream detail that may echo the prompt';

/**
 * The contract of an adapter over an HTTP upstream, against a scripted fake upstream speaking
 * `wire` (a jest `describe` block; complements {@link describeEngineContract}, which checks
 * model behaviour):
 * - simple: one text piece → one `delta` and a `stop` end, via `POST wire.path`;
 * - streaming: pieces (multi-byte, events split across 5-byte reads) → one delta each, in
 *   order, then exactly one `end`, last;
 * - usage: input, output and cached input counts exactly as the upstream reports them
 *   (`usageSource: reported`), Σ delta tokens ≤ output tokens;
 * - end reasons: `length` and `content_filter` as the provider spells them;
 * - error mapping: HTTP statuses per {@link UPSTREAM_STATUS_CONTRACT}; an in-band error event
 *   after output began and a connection cut mid-stream → `upstream_error` (earlier deltas
 *   delivered); a refused connection → `upstream_unavailable`, retryable; the upstream's error
 *   text never appears in a public message;
 * - cancellation: aborting mid-stream ends with `aborted` within 1 s and closes the upstream
 *   connection; an already-aborted signal ends with `aborted` without calling the upstream.
 */
export function describeUpstreamEngineContract(
  name: string,
  setup: () => UpstreamContractHarness | Promise<UpstreamContractHarness>,
): void {
  describe(`upstream engine contract: ${name}`, () => {
    let h: UpstreamContractHarness;
    let upstream: ScriptedUpstream;
    let adapter: EngineAdapter;
    const input = (): GenerationInput => h.input ?? { kind: 'chat', messages: [{ role: 'user', content: 'Say hi' }] };
    const usage = (inputTokens: number, outputTokens: number): TokenUsage => ({ inputTokens, outputTokens });
    const endOf = (events: EngineEvent[]): Extract<EngineEvent, { type: 'end' }> => {
      const end = events[events.length - 1];
      if (end?.type !== 'end') throw new Error('the stream did not end with an end event');
      return end;
    };
    const deltasOf = (events: EngineEvent[]): Array<Extract<EngineEvent, { type: 'delta' }>> =>
      events.filter((e): e is Extract<EngineEvent, { type: 'delta' }> => e.type === 'delta');

    beforeAll(async () => {
      h = await setup();
      upstream = await startScriptedUpstream();
      adapter = h.createAdapter(upstream.url);
    });
    afterAll(async () => {
      await adapter?.close();
      await upstream?.close();
    });
    beforeEach(() => {
      upstream.requests.length = 0;
    });

    it('simple: one answer, then a stop end', async () => {
      upstream.setScript(() => sseReply(h.wire.streamEvents(['Hello'], { reason: 'stop', usage: usage(9, 1) })));
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input()));
      expect(error).toBeUndefined();
      expect(deltasOf(events).map((d) => d.text)).toEqual(['Hello']);
      expect(endOf(events)).toMatchObject({ type: 'end', reason: 'stop' });
      expect(upstream.requests.map((r) => [r.method, r.path])).toEqual([['POST', h.wire.path]]);
    });

    it('streaming: deltas in order (events split across reads), then exactly one end, last', async () => {
      const pieces = ['Once', ' upon', ' a tïme', ' 🌍', ' 日本語', '.'];
      const events = h.wire.streamEvents(pieces, { reason: 'stop', usage: usage(9, pieces.length) });
      const total = Buffer.byteLength(events.join(''));
      const offsets = Array.from({ length: Math.floor(total / 5) }, (_, i) => (i + 1) * 5);
      upstream.setScript(() => ({ kind: 'sse', steps: splitBytes(events, offsets).map((data) => ({ data })) }));
      const result = await collectEngineEvents(adapter, engineRequest(input()));
      expect(result.error).toBeUndefined();
      expect(deltasOf(result.events).map((d) => d.text)).toEqual(pieces);
      expect(result.events.filter((e) => e.type === 'end')).toHaveLength(1);
      expect(endOf(result.events).reason).toBe('stop');
    });

    it('usage: input, output and cached input counts as the upstream reports them', async () => {
      const reported: TokenUsage = { inputTokens: 1200, outputTokens: 17, cachedInputTokens: 1024 };
      upstream.setScript(() => sseReply(h.wire.streamEvents(['a', 'b', 'c'], { reason: 'stop', usage: reported })));
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input()));
      expect(error).toBeUndefined();
      const end = endOf(events);
      expect(end).toEqual({ type: 'end', reason: 'stop', usage: reported, usageSource: 'reported' });
      const deltaTokens = deltasOf(events).reduce((n, d) => n + d.tokens, 0);
      expect(deltaTokens).toBeGreaterThan(0);
      expect(deltaTokens).toBeLessThanOrEqual(end.usage.outputTokens);
    });

    it.each(['length', 'content_filter'] as const)('end reason: %s', async (reason) => {
      upstream.setScript(() => sseReply(h.wire.streamEvents(['cut'], { reason, usage: usage(3, 1) })));
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input()));
      expect(error).toBeUndefined();
      expect(endOf(events).reason).toBe(reason);
    });

    it.each(UPSTREAM_STATUS_CONTRACT)('error mapping: HTTP $status → $code (retryable $retryable)', async ({ status, code, retryable }) => {
      upstream.setScript(() => h.wire.errorReply(status, PLANTED_UPSTREAM_MESSAGE));
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input()));
      expect(events).toEqual([]);
      expect(isWeirError(error) && { code: error.code, retryable: error.retryable }).toEqual({ code, retryable });
      expect(isWeirError(error) && error.message).not.toContain(PLANTED_UPSTREAM_MESSAGE);
    });

    it('error mapping: an in-band error event after output began → upstream_error, earlier deltas delivered', async () => {
      upstream.setScript(() => sseReply([...h.wire.streamEvents(['partial', ' answer']), h.wire.errorEvent(PLANTED_UPSTREAM_MESSAGE)]));
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input()));
      expect(deltasOf(events).map((d) => d.text)).toEqual(['partial', ' answer']);
      expect(events.some((e) => e.type === 'end')).toBe(false);
      expect(isWeirError(error) && { code: error.code, retryable: error.retryable }).toEqual({ code: 'upstream_error', retryable: false });
      expect(isWeirError(error) && error.message).not.toContain(PLANTED_UPSTREAM_MESSAGE);
    });

    it('error mapping: the connection cut mid-stream → upstream_error', async () => {
      const head = h.wire.streamEvents(['partial']);
      upstream.setScript(() => ({ kind: 'sse', steps: [...head.map((data) => ({ data })), { destroy: true, delayMs: 20 }] }));
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input()));
      expect(deltasOf(events).map((d) => d.text)).toEqual(['partial']);
      expect(isWeirError(error) && error.code).toBe('upstream_error');
    });

    it('error mapping: a refused connection → upstream_unavailable (retryable)', async () => {
      const refused = h.createAdapter(`http://127.0.0.1:${await freePort()}/v1`);
      try {
        const { error } = await collectEngineEvents(refused, engineRequest(input()));
        expect(isWeirError(error) && { code: error.code, retryable: error.retryable }).toEqual({ code: 'upstream_unavailable', retryable: true });
      } finally {
        await refused.close();
      }
    });

    it('cancellation: an abort mid-stream ends with aborted and closes the upstream connection', async () => {
      const pieces = Array.from({ length: 50 }, (_, i) => `w${i} `);
      upstream.setScript(() => sseReply(h.wire.streamEvents(pieces), { delayMs: 20, hang: true }));
      const controller = new AbortController();
      let abortedAt = 0;
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input(), { maxOutputTokens: 400, signal: controller.signal }), (event) => {
        if (event.type === 'delta' && abortedAt === 0) {
          abortedAt = performance.now();
          controller.abort();
        }
      });
      const endedAt = performance.now();
      expect(error).toBeUndefined();
      const end = endOf(events);
      expect(end.reason).toBe('aborted');
      const deltaTokens = deltasOf(events).reduce((n, d) => n + d.tokens, 0);
      expect(deltaTokens).toBeGreaterThan(0);
      expect(end.usage.outputTokens).toBeGreaterThanOrEqual(deltaTokens);
      expect(endedAt - abortedAt).toBeLessThan(1000);
      const deadline = Date.now() + 2000;
      while (!upstream.requests[0]?.clientAborted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(upstream.requests[0]?.clientAborted).toBe(true);
    });

    it('cancellation: an abort while the upstream is silent ends with aborted within 1 s', async () => {
      upstream.setScript(() => sseReply(h.wire.streamEvents(['first']), { hang: true }));
      const controller = new AbortController();
      let abortedAt = 0;
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input(), { signal: controller.signal }), (event) => {
        if (event.type === 'delta') {
          setTimeout(() => {
            abortedAt = performance.now();
            controller.abort();
          }, 50);
        }
      });
      expect(error).toBeUndefined();
      expect(endOf(events).reason).toBe('aborted');
      expect(performance.now() - abortedAt).toBeLessThan(1000);
      const deadline = Date.now() + 2000;
      while (!upstream.requests[0]?.clientAborted && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(upstream.requests[0]?.clientAborted).toBe(true);
    });

    it('cancellation: an already-aborted signal ends with aborted without calling the upstream', async () => {
      const controller = new AbortController();
      controller.abort();
      const { events, error } = await collectEngineEvents(adapter, engineRequest(input(), { signal: controller.signal }));
      expect(error).toBeUndefined();
      expect(endOf(events).reason).toBe('aborted');
      expect(upstream.requests).toHaveLength(0);
    });
  });
}

/**
 * OpenAI Chat Completions for {@link describeUpstreamEngineContract}: chunks from
 * {@link chatStreamEvents}, the usage chunk with `prompt_tokens_details.cached_tokens`
 * (cached tokens are part of `prompt_tokens`), `[DONE]`; in-band errors as
 * `data: {"error":{…}}` frames and OpenAI error bodies.
 */
export const openAIChatWire: UpstreamWire = {
  name: 'openai-compatible (chat)',
  path: '/v1/chat/completions',
  streamEvents(pieces, end) {
    if (!end) return chatStreamEvents(pieces, { finishReason: null, usage: false, done: false });
    const { inputTokens, outputTokens, cachedInputTokens } = end.usage;
    return [
      ...chatStreamEvents(pieces, { finishReason: end.reason, usage: false, done: false }),
      sseEvent({
        id: 'chatcmpl-scripted',
        object: 'chat.completion.chunk',
        created: 1_700_000_000,
        model: 'scripted-model',
        choices: [],
        usage: {
          prompt_tokens: inputTokens,
          completion_tokens: outputTokens,
          total_tokens: inputTokens + outputTokens,
          ...(cachedInputTokens !== undefined ? { prompt_tokens_details: { cached_tokens: cachedInputTokens } } : {}),
        },
      }),
      sseEvent('[DONE]'),
    ];
  },
  errorEvent: (message) => sseEvent({ error: { message, type: 'server_error', param: null, code: null } }),
  errorReply: (status, message) => ({
    kind: 'error',
    status,
    body: { error: { message, type: status === 429 ? 'rate_limit_exceeded' : status < 500 ? 'invalid_request_error' : 'server_error', param: null, code: null } },
  }),
};
