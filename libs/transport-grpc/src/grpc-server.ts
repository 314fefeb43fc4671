/**
 * Starts a grpc-js server hosting one or more Weir service bindings.
 */
import * as grpc from '@grpc/grpc-js';
import { allows, certificateIdentities, describePolicy, type PeerPolicy, type ServiceTls } from '@weir/service-tls';
import { MUX_SERVICE_DEFINITION, type MuxRoute, createMuxServer } from './mux';
import type { GrpcServiceBinding } from './server-handlers';

/** Options of {@link startGrpcServer}. */
export interface StartGrpcServerOptions {
  /** TCP port; 0 picks a free one (read it from the result). Default 0. */
  port?: number;
  /** Interface to bind. Default `127.0.0.1` (pass `0.0.0.0` in a container). */
  host?: string;
  /** The services to host (from `create…GrpcServer`). */
  services: GrpcServiceBinding[];
  /** Server credentials. Default: mutual TLS with `tls` when given, else insecure (plaintext). */
  credentials?: grpc.ServerCredentials;
  /**
   * Mutual TLS (issue 14 part 8): a client without a certificate signed by `tls.ca` fails the
   * handshake; one whose certificate names none of `tls.allowedPeers` gets `PERMISSION_DENIED`
   * on every call (checked once per mux stream, or once per plain call). Ignored when
   * `credentials` is given.
   */
  tls?: ServiceTls;
  /** grpc-js server options (e.g. `grpc.max_receive_message_length`). */
  serverOptions?: grpc.ServerOptions;
}

/** A running server. */
export interface RunningGrpcServer {
  /** The bound port. */
  port: number;
  /** `host:port` to hand to clients. */
  address: string;
  /**
   * Stops the server and closes the bindings. With `graceMs` > 0 (default 0), in-flight
   * calls get that long to finish before the rest are cut; 0 cuts them at once (tests).
   * Idempotent.
   */
  close(graceMs?: number): Promise<void>;
  /** Mux streams open now (one per client connection using `weir.mux.v1`; metrics, tests). */
  muxStreams(): number;
}

/** Binds and starts the server; rejects when the port cannot be bound. */
export async function startGrpcServer(options: StartGrpcServerOptions): Promise<RunningGrpcServer> {
  const host = options.host ?? '127.0.0.1';
  const tls = options.credentials ? undefined : options.tls;
  const interceptors = tls && tls.allowedPeers !== 'any' ? [peerInterceptor(tls.allowedPeers)] : [];
  const server = new grpc.Server({ ...options.serverOptions, interceptors: [...interceptors, ...(options.serverOptions?.interceptors ?? [])] });
  const routes = new Map<string, MuxRoute>();
  for (const binding of options.services) {
    server.addService(binding.definition, binding.handlers);
    for (const [key, definition] of Object.entries(binding.definition)) {
      const handler = binding.handlers[key];
      if (handler !== undefined) routes.set(definition.path, { definition: definition as MuxRoute['definition'], handler });
    }
  }
  // The same methods as logical calls on one long-lived stream per client (mux.ts).
  const mux = createMuxServer(routes);
  server.addService(MUX_SERVICE_DEFINITION, { call: mux.handler as grpc.UntypedHandleCall });
  const target = host.includes(':') ? `[${host}]:${options.port ?? 0}` : `${host}:${options.port ?? 0}`;
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(target, options.credentials ?? serverCredentials(tls), (error, bound) => (error ? reject(error) : resolve(bound))),
  );
  let closing: Promise<void> | undefined;
  return {
    port,
    address: host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`,
    muxStreams: () => mux.streams(),
    close(graceMs = 0) {
      closing ??= (async () => {
        // Mux streams end once their calls are done (new calls are answered UNAVAILABLE), so a
        // graceful shutdown is not held up by them.
        mux.drain();
        if (graceMs > 0) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(() => {
              server.forceShutdown();
              resolve();
            }, graceMs);
            server.tryShutdown(() => {
              clearTimeout(timer);
              resolve();
            });
          });
        } else {
          server.forceShutdown();
        }
        mux.cancelAll();
        for (const binding of options.services) binding.close();
      })();
      return closing;
    },
  };
}

/** Server credentials: mutual TLS with `tls` (client certificates required and verified against `tls.ca`), else insecure. */
export function serverCredentials(tls: ServiceTls | undefined): grpc.ServerCredentials {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  return grpc.ServerCredentials.createSsl(tls.ca, [{ private_key: tls.key, cert_chain: tls.cert }], true);
}

/**
 * Refuses, with `PERMISSION_DENIED`, a call whose client certificate (verified in the handshake)
 * names none of the services `policy` lets in. The decision is made once when the call starts
 * (one per mux stream: the logical calls on it inherit it).
 */
function peerInterceptor(policy: PeerPolicy): grpc.ServerInterceptor {
  return (_method, call) => {
    const ids = certificateIdentities(call.getAuthContext().sslPeerCertificate);
    if (allows(policy, ids)) return new grpc.ServerInterceptingCall(call);
    const details = `this service is open to ${describePolicy(policy)}, not to ${ids.length > 0 ? ids.join(', ') : 'a certificate naming no service'}`;
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({ onReceiveMetadata: () => call.sendStatus({ code: grpc.status.PERMISSION_DENIED, details }) });
      },
    });
  };
}
