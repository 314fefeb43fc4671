import type { JsonObject } from '../config-shapes';

/**
 * The pins of a tenant policy the eval pin gate judges (`assertPinGate`): its `routes`, then each
 * use case's chain as the route it is (`{alias: model, use_case: name, pin}`), so pinning a use
 * case's version to a revision that was never the alias's stable arm needs a passing eval too.
 * Malformed entries are passed through for the gate to skip (the configuration check reports them).
 */
export function gatedRoutesOf(policy: JsonObject): unknown[] {
  const routes = Array.isArray(policy.routes) ? policy.routes : [];
  const useCases = Array.isArray(policy.use_cases) ? policy.use_cases : [];
  const pins = useCases.flatMap((u: unknown) => {
    const uc = u as { name?: unknown; model?: unknown; pin?: unknown } | null;
    if (uc === null || typeof uc !== 'object' || typeof uc.model !== 'string' || typeof uc.pin !== 'string') return [];
    return [{ alias: uc.model, ...(typeof uc.name === 'string' ? { use_case: uc.name } : {}), pin: uc.pin }];
  });
  return [...routes, ...pins];
}
