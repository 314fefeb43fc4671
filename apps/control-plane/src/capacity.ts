/**
 * The capacity controller as the control plane runs it (docs/capacity.md): fed by the
 * schedulers' telemetry on `<ns>.capacity.telemetry.*`, publishing each decision on
 * `<ns>.capacity.desired.<pool>`, read by the admin API (`GET /admin/v1/capacity`) and the
 * `weir_pool_desired_replicas{pool}` gauge.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { type CapacityController, createCapacityController } from '@weir/capacity';
import { createCapacityDecisionPublisher, subscribeCapacityTelemetry } from '@weir/messaging-nats';
import type { Telemetry, WeirLogger } from '@weir/telemetry';

/** Dependencies of {@link startCapacityController}. */
export interface CapacityDeps {
  nc: NatsConnection;
  /** `WEIR_NATS_NAMESPACE`. */
  namespace: string;
  logger: WeirLogger;
  /** Where the gauge is registered. */
  telemetry: Telemetry;
}

/** A running controller. */
export interface RunningCapacityController {
  controller: CapacityController;
  /** Unsubscribes from the telemetry. */
  stop(): void;
}

/**
 * Creates the controller (wall clock; other settings at their documented defaults) and
 * subscribes it to every pool's telemetry. A sample the controller refuses (a negative or
 * non-integer count) is logged and skipped.
 * @param replicaTokensPerSecondHint output tokens/s one replica is assumed to sustain until the
 *   pool's telemetry has measured it (`WEIR_CAPACITY_REPLICA_TPS_HINT`, > 0).
 * @throws CapacityInputError when the hint is not a positive number.
 */
export function startCapacityController(deps: CapacityDeps, replicaTokensPerSecondHint: number): RunningCapacityController {
  const { logger } = deps;
  const publisher = createCapacityDecisionPublisher(deps.nc, deps.namespace, { logger });
  const controller = createCapacityController({
    clock: { now: () => Date.now() },
    replicaTokensPerSecondHint,
    onDecision: (decision) => publisher.publish(decision),
  });
  deps.telemetry.observeCapacity(() => controller.decisions());
  const unsubscribe = subscribeCapacityTelemetry(
    deps.nc,
    deps.namespace,
    (sample) => {
      try {
        controller.ingest(sample);
      } catch (err) {
        logger.warn({ err, pool: sample.pool, source: sample.source }, 'capacity telemetry sample refused; skipped');
      }
    },
    { logger },
  );
  return { controller, stop: unsubscribe };
}
