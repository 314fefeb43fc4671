import type { EngineAdapter, EngineSpec, RevisionSpec } from '@weir/core';
import { WeirError } from '@weir/core';
import { type AnthropicEngineDeps, createAnthropicEngine } from './anthropic/anthropic-engine';
import { createLlamaCppEngine } from './llamacpp/llamacpp-engine';
import type { EngineLogger } from './logger';
import { createOpenAICompatibleEngine, type OpenAICompatibleEngineDeps } from './openai-compatible/openai-compatible-engine';
import { createSimulatedEngine } from './simulated/simulated-engine';

/** Dependencies of {@link createEngine}, passed on to the adapter the spec selects. */
export interface CreateEngineDeps {
  logger?: EngineLogger;
  /**
   * The revision's kind and vectors (`RevisionSpec.kind`, `.embedding`): an embedding revision's
   * llama.cpp engine creates only an embedding context; an OpenAI-compatible one passes
   * `dimensions` through when `embedding.variableDimensions`. Default: a generation revision.
   */
  revision?: Pick<RevisionSpec, 'kind' | 'embedding'>;
  /** For `openai-compatible` specs: tokenizer, dispatcher, env (see {@link OpenAICompatibleEngineDeps}). */
  openai?: Omit<OpenAICompatibleEngineDeps, 'logger'>;
  /** For `anthropic` specs: token counter, dispatcher, env (see {@link AnthropicEngineDeps}). */
  anthropic?: Omit<AnthropicEngineDeps, 'logger'>;
}

/**
 * Creates the adapter for an engine spec: one exhaustive switch over `spec.kind` (adding a
 * kind to `EngineSpec` is a compile error here until it is handled).
 *
 * - `llamacpp` → {@link createLlamaCppEngine}; `spec.modelPath` must be resolved already
 *   (config load applies `WEIR_MODEL_PATH`), else `WeirError('engine_unavailable')`.
 * - `openai-compatible` → {@link createOpenAICompatibleEngine}.
 * - `anthropic` → {@link createAnthropicEngine} (context tokens: its default, 200,000).
 * - `simulated` → {@link createSimulatedEngine} (filler tokens with a GPU replica's timing; load work only).
 *
 * @throws whatever the chosen factory throws (a model that fails to load).
 */
export async function createEngine(spec: EngineSpec, deps: CreateEngineDeps = {}): Promise<EngineAdapter> {
  switch (spec.kind) {
    case 'llamacpp': {
      const modelPath = spec.modelPath;
      if (!modelPath) throw new WeirError('engine_unavailable', 'llamacpp engine spec has no modelPath');
      return createLlamaCppEngine({ ...spec, modelPath, embeddingOnly: deps.revision?.kind === 'embedding' }, { logger: deps.logger });
    }
    case 'openai-compatible':
      return createOpenAICompatibleEngine({ ...spec, variableDimensions: deps.revision?.embedding?.variableDimensions === true }, { ...deps.openai, logger: deps.logger });
    case 'anthropic':
      return createAnthropicEngine(spec, { ...deps.anthropic, logger: deps.logger });
    case 'simulated':
      return createSimulatedEngine(spec, { logger: deps.logger });
    default: {
      const unreachable: never = spec;
      throw new WeirError('internal', `unknown engine kind ${(unreachable as { kind: string }).kind}`);
    }
  }
}
