import { type EngineRequest, WeirError } from '@weir/core';

/**
 * Refuses a request carrying tools on an engine that cannot call them (llama.cpp and the
 * simulated engine): tools are never silently dropped. The gateway's capability check refuses such
 * requests first; this guards a misdeclared revision.
 * @throws WeirError `invalid_request` with `param: tools`.
 */
export function refuseTools(request: Pick<EngineRequest, 'tools'>, engineKind: string): void {
  if (request.tools && request.tools.length > 0) {
    throw new WeirError('invalid_request', `the ${engineKind} engine cannot call tools; remove \`tools\`, or route to a revision that declares \`capabilities.tools\``, { param: 'tools' });
  }
}
