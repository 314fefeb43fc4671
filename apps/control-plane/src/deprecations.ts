/**
 * The deprecation event as the control plane runs it: once a day per deprecated revision (on
 * its announcement day), a `revision_deprecation_announced` event is audited, logged at warn
 * and published on NATS `<ns>.events.deprecation` (core NATS, JSON).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { createDeprecationAnnouncer, type DeprecationAnnouncement, type DeprecationAnnouncer } from '@weir/control-plane';
import { createNatsTopic, jsonCodec, natsNames } from '@weir/messaging-nats';
import type { WeirDatabase } from '@weir/store-pg';
import type { WeirLogger } from '@weir/telemetry';

/** The NATS subject of deprecation events: `<ns>.events.deprecation`. */
export function deprecationEventSubject(namespace: string): string {
  natsNames(namespace);
  return `${namespace}.events.deprecation`;
}

/**
 * Starts the announcer, checking every `intervalMs` (`WEIR_DEPRECATION_CHECK_MS`, default
 * 60,000): an announcement reaches subscribers at most once (the audit log keeps it).
 * @returns the running announcer; `stop()` it on shutdown.
 */
export function startDeprecationAnnouncer(deps: { db: WeirDatabase['db']; nc: NatsConnection; namespace: string; logger: WeirLogger }, intervalMs: number): DeprecationAnnouncer {
  const topic = createNatsTopic(deps.nc, deprecationEventSubject(deps.namespace), jsonCodec<DeprecationAnnouncement>(), { logger: deps.logger });
  const announcer = createDeprecationAnnouncer({
    db: deps.db,
    publish: (event) => {
      deps.logger.warn({ ...event, event: event.type }, `revision ${event.revision} is deprecated: it retires on ${event.retires_on}; use ${event.replacement}`);
      topic.publish(event);
    },
    logger: { info: (obj, msg) => deps.logger.debug(obj, msg), warn: (obj, msg) => deps.logger.warn(obj, msg) },
  });
  announcer.start(intervalMs);
  return announcer;
}
