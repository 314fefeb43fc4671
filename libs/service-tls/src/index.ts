/**
 * Service-to-service authentication of the split topology (issue 14 part 8): mutual TLS with
 * service names in certificates. Loads a service's material from `WEIR_TLS_*` files, says who
 * a peer is and whether a policy lets it in, builds the HTTPS server options and the undici
 * dispatcher of engine replicas and their callers, and issues the launcher's development PKI.
 * The gRPC side lives in `@weir/transport-grpc` (`tls` options).
 */
export {
  SERVICE_NAMES,
  DEV_TRUST_DOMAIN,
  serviceUri,
  peerPolicy,
  allows,
  describePolicy,
  certificateIdentities,
  serverIdentityCheck,
  type ServiceName,
  type PeerPolicy,
} from './identity';
export { loadServiceTls, serviceTlsFromEnv, ServiceTlsError, TLS_ENV, CERTIFICATE_EXPIRY_WARNING_MS, type ServiceTls, type LoadServiceTlsOptions, type ServiceTlsLogger } from './service-tls';
export { peerIdentities, authorizePeer, createServiceTlsAgent, httpsServerOptions, type PeerDecision, type ServiceTlsAgentOptions } from './peer';
export { issueDevPki, type DevPki, type DevPkiOptions, type DevCertificateSpec, type DevCertificateFiles } from './dev-pki';
