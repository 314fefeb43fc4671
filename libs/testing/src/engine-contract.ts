import type { EngineAdapter, EngineEvent, EngineRequest, GenerationInput, WeirErrorCode } from '@weir/core';
import { isWeirError } from '@weir/core';

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
