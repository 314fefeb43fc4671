import { createEngineServer, type EngineServerOptions } from '@weir/engine-server';
import type { EngineLogger, SimulatedEngine } from '@weir/engines';

/** `owned_by` on `/v1/models`: every listing says the model is simulated. */
export const SIMULATOR_OWNER = 'weir-simulator';
/** Header on every response of the simulated engine. */
export const SIMULATED_HEADER = 'x-weir-simulated';

/**
 * The simulated engine served as an OpenAI-compatible engine app: the same routes as
 * `apps/engine-llamacpp` (`@weir/engine-server`), over `createSimulatedEngine`, with every
 * response marked simulated (`x-weir-simulated: true`; `owned_by: "weir-simulator"`).
 */
export function createSimServer(
  engine: SimulatedEngine,
  options: { modelName: string; logger: EngineLogger } & Partial<Omit<EngineServerOptions, 'engine' | 'modelName' | 'logger' | 'ownedBy' | 'responseHeaders'>>,
) {
  return createEngineServer({ ...options, engine, ownedBy: SIMULATOR_OWNER, responseHeaders: { [SIMULATED_HEADER]: 'true' } });
}
