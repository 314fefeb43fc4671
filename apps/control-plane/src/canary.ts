/**
 * The canary guard as the control plane runs it: regressing canaries are rolled back through
 * the control plane's change path (`rollbackCanaryArm`: weight 0, an `alias.auto_rollback`
 * audit entry, a new snapshot) and each rollback is logged and published on NATS.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { type CanaryGuard, type CanaryRolledBackEvent, type ControlPlane, createCanaryGuard, rollbackCanaryArm } from '@weir/control-plane';
import { createNatsTopic, jsonCodec, natsNames } from '@weir/messaging-nats';
import type { WeirLogger } from '@weir/telemetry';

/** The NATS subject of `canary_rolled_back` events: `<ns>.events.canary` (core NATS, JSON). */
export function canaryEventSubject(namespace: string): string {
  natsNames(namespace);
  return `${namespace}.events.canary`;
}

/** Dependencies of {@link startCanaryGuard}. */
export interface CanaryGuardDeps {
  cp: ControlPlane;
  nc: NatsConnection;
  /** `WEIR_NATS_NAMESPACE`. */
  namespace: string;
  logger: WeirLogger;
}

/**
 * Creates the canary guard over the control plane's database and starts it, checking every
 * `intervalMs` (`WEIR_CANARY_GUARD_INTERVAL_MS`, default 15,000). Each rollback's event is
 * logged at warn (`event: 'canary_rolled_back'`) and published on {@link canaryEventSubject}
 * (at most once: a subscriber that is away misses it; the audit log keeps the record).
 * @returns the running guard; `stop()` it on shutdown.
 */
export function startCanaryGuard(deps: CanaryGuardDeps, intervalMs: number): CanaryGuard {
  const { cp, logger } = deps;
  const topic = createNatsTopic(deps.nc, canaryEventSubject(deps.namespace), jsonCodec<CanaryRolledBackEvent>(), { logger });
  const guard = createCanaryGuard({
    db: cp.db,
    rollback: async (_alias, request) => {
      await rollbackCanaryArm(cp, request);
    },
    onEvent: (event) => {
      logger.warn({ ...event, event: 'canary_rolled_back' }, `canary ${event.revision} of alias ${event.alias} rolled back: ${event.reason}`);
      topic.publish(event);
    },
    // The event line above says it all; the guard's own line would repeat it.
    logger: { warn: (obj, msg) => logger.debug(obj, msg), error: (obj, msg) => logger.error(obj, msg) },
  });
  guard.start(intervalMs);
  return guard;
}
