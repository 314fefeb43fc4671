/**
 * The connection pool every hosted-upstream and replica adapter uses by default: undici's
 * keep-alive `Agent` whose connections resolve names through `createGuardedLookup`, so a name
 * that resolves to a link-local or cloud metadata address (169.254.169.254, fe80::/10, …) is
 * refused when the connection is made, not only when the configuration is read. The lookup
 * runs once per new connection, never per request on a kept-alive one. undici's `dispatch`
 * (which the adapters use) follows no redirects: a 3xx from an upstream is an error, so a
 * credential never travels to a `Location` on another host.
 */
import { createGuardedLookup, type EgressPolicy, type LookupFunction, processEgressPolicy } from '@weir/config';
import { WeirError } from '@weir/core';
import { Agent, type Dispatcher } from 'undici';

const agents = new WeakMap<EgressPolicy, Dispatcher>();

/**
 * The guarded `Agent` for `policy`'s upstream hosts (one per policy object, shared).
 *
 * @param resolve the underlying DNS lookup (tests); default `dns.lookup`. With it given, a new
 *   Agent is made every call (not cached).
 */
export function egressDispatcher(policy: EgressPolicy = processEgressPolicy(), resolve?: LookupFunction): Dispatcher {
  if (resolve) return new Agent({ connect: { lookup: createGuardedLookup(policy.upstreamHosts, resolve) } });
  let agent = agents.get(policy);
  if (!agent) agents.set(policy, (agent = new Agent({ connect: { lookup: createGuardedLookup(policy.upstreamHosts) } })));
  return agent;
}

/** Whether `error` (or a cause of it) is the guarded lookup's refusal. */
export function isEgressRefusal(error: unknown): error is Error {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if ((e as { code?: unknown }).code === 'EWEIREGRESS') return true;
  }
  return false;
}

/**
 * The refusal as the adapters report it: `engine_unavailable`, not retryable. The public
 * message names no host or address; the lookup's message (host, address) is the `cause`.
 */
export function egressRefusalError(error: Error): WeirError {
  return new WeirError('engine_unavailable', 'the upstream resolves to a link-local or cloud metadata address, which the egress policy refuses', { cause: error });
}
