/**
 * Names of one Weir deployment's NATS resources. Deployments that share a NATS server must
 * use different namespaces, or their ledgers take each other's usage records and their
 * schedulers act on each other's replica health (replica ids repeat across deployments).
 */
import { WeirError } from '@weir/core';

/** A deployment's NATS names. */
export interface NatsNames {
  /** JetStream stream of usage records, e.g. `WEIR_USAGE`. */
  usageStream: string;
  /** Usage subjects are `<usageSubjectPrefix>.<tenant>`; the stream captures `<prefix>.>`. */
  usageSubjectPrefix: string;
  /** The ledger's durable consumer. */
  ledgerDurable: string;
  /** Cancellation fan-out subject. */
  cancelSubject: string;
  /** Replica health subject. */
  healthSubject: string;
  /** Burn-rate alerts (`BurnRateAlert`, JSON, core NATS), e.g. `weir.alerts.burn_rate`. */
  burnRateAlertSubject: string;
}

/**
 * The NATS names of namespace `ns` (`WEIR_NATS_NAMESPACE`; lowercase letters, digits and `-`,
 * at most 32). The default namespace `weir` gives `WEIR_USAGE`, `weir.usage.<tenant>`,
 * `weir-ledger`, `weir.cancel`, `weir.health` and `weir.alerts.burn_rate`.
 * @throws WeirError `invalid_request` for a malformed namespace.
 */
export function natsNames(ns = 'weir'): NatsNames {
  if (!/^[a-z0-9][a-z0-9-]{0,31}$/.test(ns)) {
    throw new WeirError('invalid_request', `WEIR_NATS_NAMESPACE must be 1–32 lowercase letters, digits or '-', got ${JSON.stringify(ns)}`);
  }
  return {
    usageStream: `${ns.toUpperCase().replace(/-/g, '_')}_USAGE`,
    usageSubjectPrefix: `${ns}.usage`,
    ledgerDurable: `${ns}-ledger`,
    cancelSubject: `${ns}.cancel`,
    healthSubject: `${ns}.health`,
    burnRateAlertSubject: `${ns}.alerts.burn_rate`,
  };
}
