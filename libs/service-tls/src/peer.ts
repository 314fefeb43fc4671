/**
 * The TLS peer of a connection: who it is (its certificate's service names) and whether a
 * policy lets it in — for HTTP servers started with `requestCert: true` (engine replicas), and
 * the undici dispatcher their callers use.
 */
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { Agent } from 'undici';
import { allows, certificateIdentities, describePolicy, type PeerPolicy, serverIdentityCheck } from './identity';
import type { ServiceTls } from './service-tls';

/** The outcome of {@link authorizePeer}. */
export type PeerDecision =
  | { ok: true; identities: readonly string[] }
  /** `unauthenticated`: no certificate, or one the CA did not sign; `forbidden`: a verified peer the policy does not name. */
  | { ok: false; reason: 'unauthenticated' | 'forbidden'; message: string };

const verified = new WeakMap<Socket, readonly string[] | null>();

/**
 * The verified service names of the peer on `socket` (cached per connection: a TLS session's
 * peer does not change), or null when it sent no certificate or one the server's CA did not
 * sign (`requestCert: true, rejectUnauthorized: false` lets such a client finish the handshake so
 * that it can be told 401; this is where it is stopped).
 */
export function peerIdentities(socket: Socket): readonly string[] | null {
  let ids = verified.get(socket);
  if (ids !== undefined) return ids;
  const tls = socket as TLSSocket;
  ids = tls.encrypted && tls.authorized ? certificateIdentities(tls.getPeerCertificate()) : null;
  verified.set(socket, ids);
  return ids;
}

/** Whether the peer on `socket` passes `policy`; `what` names the resource in the refusal (e.g. `generation`). */
export function authorizePeer(socket: Socket, policy: PeerPolicy, what: string): PeerDecision {
  const ids = peerIdentities(socket);
  if (ids === null) return { ok: false, reason: 'unauthenticated', message: 'a client certificate signed by the service CA is required' };
  if (allows(policy, ids)) return { ok: true, identities: ids };
  return { ok: false, reason: 'forbidden', message: `${what} is open to ${describePolicy(policy)}, not to ${ids.length > 0 ? ids.join(', ') : 'a certificate naming no service'}` };
}

/** Options of {@link createServiceTlsAgent}. */
export interface ServiceTlsAgentOptions {
  /** The service the servers must be (their certificate names it), e.g. `engine`. Default: any the CA signed. */
  expectedServer?: string;
  /** Passed to undici's Agent (connections per origin, timeouts). */
  agent?: ConstructorParameters<typeof Agent>[0];
}

/**
 * An undici dispatcher that presents this service's certificate, trusts only the service CA
 * and checks the server's host name and service name; keep-alive pools as undici's default.
 * Use it only for Weir's own servers (engine replicas): a hosted upstream has a public CA.
 */
export function createServiceTlsAgent(tls: ServiceTls, options: ServiceTlsAgentOptions = {}): Agent {
  return new Agent({
    ...options.agent,
    connect: { ca: tls.ca, cert: tls.cert, key: tls.key, checkServerIdentity: serverIdentityCheck(options.expectedServer) },
  });
}

/** `https.createServer` options of a server that asks for client certificates and decides per request with {@link authorizePeer}. */
export function httpsServerOptions(tls: ServiceTls): { ca: Buffer; cert: Buffer; key: Buffer; requestCert: true; rejectUnauthorized: false } {
  return { ca: tls.ca, cert: tls.cert, key: tls.key, requestCert: true, rejectUnauthorized: false };
}
