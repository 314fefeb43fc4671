/**
 * The {@link EvalGenerate} port over `@weir/engines`: each revision's engine is created from
 * its {@link RevisionSpec} on first use (`createEngine`, the same factory the data plane uses),
 * kept for the rest of the run, and closed by `close()`.
 *
 * Replays go straight to the engine: they pass no admission, scheduler or ledger, so they are
 * not billed to the tenant and do not count in the canary guard's live statistics.
 */
import { type EngineAdapter, type RevisionSpec, WeirError } from '@weir/core';
import { createEngine as createEngineDefault, type CreateEngineDeps } from '@weir/engines';
import type { EvalGenerate, EvalGenerateRequest, EvalGenerateResult } from './eval-types';

/** A {@link EvalGenerate} that owns engines and must be closed. */
export interface EngineEvalGenerator {
  generate: EvalGenerate;
  /** Closes every engine it created. Idempotent. */
  close(): Promise<void>;
}

/** Options of {@link createEngineEvalGenerator}. */
export interface EngineEvalGeneratorOptions {
  /** The revision's spec (camelCase, as `@weir/config` produces it); undefined when unknown. */
  resolveRevision(revisionId: string): Promise<RevisionSpec | undefined> | RevisionSpec | undefined;
  /** Engine factory. Default `createEngine` of `@weir/engines`. */
  createEngine?: (spec: RevisionSpec['engine'], deps?: CreateEngineDeps) => Promise<EngineAdapter>;
  /** Passed to the factory (logger, upstream token counters). */
  engineDeps?: CreateEngineDeps;
}

/**
 * Creates the engine-backed generation port. A call with an unknown revision resolves with
 * error `model_not_found`; an engine that throws (load failure, upstream error) resolves with
 * the WeirError's code and public message. Text arrives by deltas; `ttftMs` is measured to the
 * first non-empty delta.
 */
export function createEngineEvalGenerator(options: EngineEvalGeneratorOptions): EngineEvalGenerator {
  const create = options.createEngine ?? createEngineDefault;
  const engines = new Map<string, Promise<EngineAdapter>>();
  let sequence = 0;

  const engineFor = (spec: RevisionSpec): Promise<EngineAdapter> => {
    let engine = engines.get(spec.id);
    if (!engine) {
      engine = create(spec.engine, options.engineDeps);
      engines.set(spec.id, engine);
      // A failed load is not cached: the next run tries again.
      engine.catch(() => engines.delete(spec.id));
    }
    return engine;
  };

  const generate: EvalGenerate = async (revisionId: string, request: EvalGenerateRequest): Promise<EvalGenerateResult> => {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    let text = '';
    let ttftMs: number | null = null;
    try {
      const spec = await options.resolveRevision(revisionId);
      if (!spec) throw new WeirError('model_not_found', `revision ${revisionId} cannot be replayed here: it is not in the configuration, or this process does not serve it (e.g. its model file is missing on this host)`);
      const engine = await engineFor(spec);
      sequence += 1;
      for await (const event of engine.generate({
        input: { kind: 'chat', messages: request.messages.map((m) => ({ role: m.role, content: m.content })) },
        maxOutputTokens: Math.min(request.maxTokens, spec.maxOutputTokens),
        sampling: { temperature: 0 },
        signal: request.signal,
        generationId: `gen_eval_${Date.now().toString(36)}_${sequence}`,
        ...(request.outputSchema ? { outputSchema: request.outputSchema } : {}),
      })) {
        if (event.type === 'delta' && event.text.length > 0) {
          ttftMs ??= elapsed();
          text += event.text;
        }
        if (event.type === 'end' && event.reason === 'aborted') throw new WeirError('deadline_exceeded', 'the replay was cut at its timeout');
      }
      return { text, ttftMs, totalMs: elapsed() };
    } catch (err) {
      const code = err instanceof WeirError ? err.code : 'internal';
      const message = err instanceof WeirError ? err.message : 'the engine failed';
      return { text, ttftMs, totalMs: elapsed(), error: { code, message } };
    }
  };

  let closed: Promise<void> | undefined;
  return {
    generate,
    close: () =>
      (closed ??= (async () => {
        const all = [...engines.values()];
        engines.clear();
        await Promise.allSettled(all.map(async (engine) => (await engine).close()));
      })()),
  };
}
