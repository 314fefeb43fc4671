import type { EngineAdapter, GenerationOutcome, RelayEvent, RelayHandle, RelayJob, RelayService } from '@weir/core';
import { type ContractSubject, contractCallers, contractPlatformConfig } from './port-contract-fixtures';
import { type EngineScript, SCRIPTED_INPUT_TOKENS, type ScriptedEngine, createScriptedEngine, scriptInput } from './scripted-engine';

/** What a relay under contract must be built with. */
export interface RelayContractDeps {
  /** The engine serving replica {@link RelayContractDeps.replicaId}. */
  engine: EngineAdapter;
  replicaId: string;
  /** The relay's cancellation grace period (ms). */
  cancelGraceMs: number;
}

/** A relay job for the contract suites: `tiny@1` on replica `tiny@1/0`, deadline in 10 s, on `performance.now()`. */
export function relayJob(script: EngineScript, overrides: Partial<RelayJob> = {}): RelayJob {
  const now = performance.now();
  const revision = contractPlatformConfig().revisions[0];
  return {
    generationId: `gen_${Math.random().toString(36).slice(2, 12)}`,
    requestId: `req_${Math.random().toString(36).slice(2, 12)}`,
    route: 'generations',
    caller: contractCallers.acme,
    modelAlias: 'tiny',
    revision,
    replicaId: 'tiny@1/0',
    engineRequest: { input: scriptInput(script), maxOutputTokens: 100, sampling: { temperature: 0 } },
    arrivedAt: now,
    deadlineAt: now + 10_000,
    queueMs: 12.5,
    inputTokens: SCRIPTED_INPUT_TOKENS,
    ...overrides,
  };
}

/** Reads a handle's events; `onDelta` sees each delta's running index. */
export async function collectRelayEvents(handle: RelayHandle, onDelta?: (index: number) => void): Promise<RelayEvent[]> {
  const events: RelayEvent[] = [];
  for await (const event of handle.events) {
    events.push(event);
    if (event.type === 'delta') onDelta?.(events.length - 1);
  }
  return events;
}

const deltaTokens = (events: RelayEvent[]) => events.reduce((n, e) => n + (e.type === 'delta' ? e.tokens : 0), 0);

function endOf(events: RelayEvent[]): GenerationOutcome {
  const last = events[events.length - 1];
  if (last?.type !== 'end') throw new Error('the stream did not end with an end event');
  expect(events.filter((e) => e.type === 'end')).toHaveLength(1);
  return last.outcome;
}

/**
 * The contract every `RelayService` binding passes (a jest `describe` block), with the
 * semantics of the in-process relay over a scripted engine (`setup` builds the relay with
 * {@link RelayContractDeps} and `performance.now()` as its clock, before each test):
 * - deltas stream in order, then exactly one end, last; `done` resolves with the same
 *   outcome; usage equals the deltas relayed; cost, revision and timings are set;
 * - `length` at the output limit; the engine receives the job's engine request intact;
 * - `stop('cancel_requested')` ends `cancelled` promptly; `stop('client_disconnected')`
 *   lets the generation run for the grace period and bills its tokens;
 * - the deadline ends `deadline`; an engine fault ends `error` with its code and the
 *   tokens produced before it;
 * - `done` resolves even when nobody reads `events`; `stop` after the end is a no-op.
 */
export function describeRelayContract(name: string, setup: (deps: RelayContractDeps) => Promise<ContractSubject<RelayService>>): void {
  describe(`relay contract: ${name}`, () => {
    let subject: ContractSubject<RelayService>;
    let engine: ScriptedEngine;
    const relay = () => subject.service;

    beforeEach(async () => {
      engine = createScriptedEngine();
      subject = await setup({ engine, replicaId: 'tiny@1/0', cancelGraceMs: 60 });
    });
    afterEach(async () => {
      await subject?.close?.();
    });

    it('streams deltas then exactly one end; done has the same outcome', async () => {
      const job = relayJob({ tokens: 5 });
      const handle = relay().start(job);
      const events = await collectRelayEvents(handle);
      expect(events.map((e) => (e.type === 'delta' ? e.text : 'end'))).toEqual(['t0 ', 't1 ', 't2 ', 't3 ', 't4 ', 'end']);
      const outcome = endOf(events);
      expect(await handle.done).toEqual(outcome);
      expect(outcome.finishReason).toBe('stop');
      expect(outcome.usage).toMatchObject({ inputTokens: SCRIPTED_INPUT_TOKENS, outputTokens: 5 });
      expect(outcome.modelRevision).toBe('tiny@1');
      expect(outcome.costNanoUsd).toBeGreaterThan(0);
      expect(Number.isInteger(outcome.costNanoUsd)).toBe(true);
      expect(outcome.error).toBeUndefined();
      expect(outcome.timings.queueMs).toBe(job.queueMs);
      expect(outcome.timings.ttftMs).not.toBeNull();
      expect(outcome.timings.totalMs).toBeGreaterThanOrEqual(outcome.timings.ttftMs ?? 0);
    });

    it('ends with length at the output limit', async () => {
      const job = relayJob({ tokens: 50 });
      const handle = relay().start({ ...job, engineRequest: { ...job.engineRequest, maxOutputTokens: 3 } });
      const outcome = endOf(await collectRelayEvents(handle));
      expect(outcome.finishReason).toBe('length');
      expect(outcome.usage.outputTokens).toBe(3);
    });

    it('hands the engine the job engine request intact', async () => {
      const job = relayJob({ tokens: 2 });
      const engineRequest: RelayJob['engineRequest'] = {
        input: {
          kind: 'chat',
          messages: [
            { role: 'system', content: 'be brief' },
            { role: 'user', content: 'hi', name: 'ann' },
            { role: 'assistant', content: 'hello' },
            { role: 'user', content: JSON.stringify({ tokens: 2 }) },
          ],
        },
        maxOutputTokens: 42,
        sampling: { temperature: 0.7, topP: 0.9, seed: 1234, stop: ['\n\n', 'END'] },
      };
      const handle = relay().start({ ...job, engineRequest });
      await handle.done;
      expect(engine.requests).toHaveLength(1);
      expect(engine.requests[0]).toEqual({ ...engineRequest, generationId: job.generationId });
    });

    it('stops promptly on cancel_requested, billing what was produced', async () => {
      const handle = relay().start(relayJob({ tokens: 200, delayMs: 3 }));
      let stoppedAt = 0;
      const events = await collectRelayEvents(handle, (i) => {
        if (i === 2) {
          stoppedAt = performance.now();
          handle.stop('cancel_requested');
        }
      });
      const outcome = endOf(events);
      expect(outcome.finishReason).toBe('cancelled');
      expect(outcome.usage.outputTokens).toBe(deltaTokens(events));
      expect(outcome.usage.outputTokens).toBeLessThan(200);
      expect(performance.now() - stoppedAt).toBeLessThan(500);
    });

    it('runs on for the grace period after client_disconnected and bills those tokens', async () => {
      const handle = relay().start(relayJob({ tokens: 400, delayMs: 2 }));
      let tokensAtStop = 0;
      const events = await collectRelayEvents(handle, (i) => {
        if (i === 1) {
          tokensAtStop = 2;
          handle.stop('client_disconnected');
        }
      });
      const outcome = endOf(events);
      expect(outcome.finishReason).toBe('cancelled');
      expect(outcome.usage.outputTokens).toBe(deltaTokens(events));
      expect(outcome.usage.outputTokens).toBeGreaterThan(tokensAtStop + 3);
      expect(outcome.usage.outputTokens).toBeLessThan(400);
    });

    it('ends with deadline when the deadline passes', async () => {
      const now = performance.now();
      const handle = relay().start(relayJob({ tokens: 400, delayMs: 2 }, { arrivedAt: now, deadlineAt: now + 60 }));
      const events = await collectRelayEvents(handle);
      const outcome = endOf(events);
      expect(outcome.finishReason).toBe('deadline');
      expect(outcome.usage.outputTokens).toBe(deltaTokens(events));
      expect(outcome.usage.outputTokens).toBeLessThan(400);
    });

    it('ends with error and the tokens produced when the engine fails mid-stream', async () => {
      const events = await collectRelayEvents(relay().start(relayJob({ tokens: 10, failAfter: 3 })));
      const outcome = endOf(events);
      expect(outcome.finishReason).toBe('error');
      expect(outcome.error?.code).toBe('upstream_error');
      expect(outcome.error?.message.length).toBeGreaterThan(0);
      expect(outcome.usage.outputTokens).toBe(3);
      expect(deltaTokens(events)).toBe(3);
    });

    it('resolves done without a reader, and ignores stop after the end', async () => {
      const handle = relay().start(relayJob({ tokens: 3 }));
      const outcome = await handle.done;
      expect(outcome.finishReason).toBe('stop');
      handle.stop('cancel_requested');
      handle.stop('client_disconnected');
      expect(await handle.done).toEqual(outcome);
      const events = await collectRelayEvents(handle);
      expect(endOf(events)).toEqual(outcome);
    });
  });
}
