import { connect, errors, type NatsConnection, type NodeConnectionOptions, type Status } from '@nats-io/transport-node';
import { WeirError } from '@weir/core';
import type { MessagingLogger } from '@weir/messaging';
import { type NatsAuth, natsAuthFromEnv } from './nats-auth';

/** Options for {@link connectNats}. */
export interface ConnectNatsOptions {
  /** Server URL(s), e.g. `nats://127.0.0.1:4222` or `127.0.0.1:4222`. */
  servers: string | string[];
  /** Connection name shown by the server (`nats server report connections`), e.g. `weir-gateway`. */
  name: string;
  /** Connection status changes go here (never payloads). Default: silent. */
  logger?: MessagingLogger;
  /** Wait between reconnect attempts to the same server (ms). Default 1,000. */
  reconnectTimeWaitMs?: number;
  /** Random extra wait added to each reconnect wait (ms), so clients do not stampede. Default 500. */
  reconnectJitterMs?: number;
  /** Timeout of one connect attempt (ms). Default 5,000. */
  connectTimeoutMs?: number;
  /** Client ping interval (ms); two unanswered pings mark the connection stale. Default 10,000. */
  pingIntervalMs?: number;
  /**
   * When true, the first connect retries (with the same wait) until a server answers instead of
   * failing. Default false: a wrong URL fails fast at startup.
   */
  waitOnFirstConnect?: boolean;
  /**
   * Credentials and TLS (issue 14 part 8), from {@link natsAuthFromEnv} called once at start.
   * Default: `natsAuthFromEnv(process.env)` (so a process given `NATS_*` variables always
   * presents them); pass `NO_NATS_AUTH` explicitly for none.
   */
  auth?: NatsAuth;
}

/**
 * Connects to NATS for Weir: presents `auth`'s credentials and TLS settings, reconnects forever
 * (`maxReconnectAttempts: -1`) with a bounded wait between attempts (`reconnectTimeWaitMs` + up
 * to `reconnectJitterMs`), and logs status changes (disconnect and error at warn, reconnect at
 * info, close at info) in the background — never a secret or a payload.
 * While disconnected the client buffers publishes and resends them after reconnecting; callers
 * that need durability (the usage sink) still await JetStream acks.
 * With `waitOnFirstConnect`, the first connect is retried while no server answers, but a server
 * that refuses the credentials ends it at once (retrying cannot fix a wrong password).
 * @throws WeirError `invalid_request` when `auth` is omitted and the `NATS_*` variables are
 *   invalid ({@link natsAuthFromEnv}).
 * @throws WeirError `upstream_unavailable` when the first connect fails and `waitOnFirstConnect`
 *   is false (retryable), or when the server refuses the credentials (not retryable; the message
 *   names the variables they came from, never their values); the NATS error is the `cause`.
 */
export async function connectNats(options: ConnectNatsOptions): Promise<NatsConnection> {
  const { logger } = options;
  const auth = options.auth ?? natsAuthFromEnv(process.env);
  const reconnectTimeWait = options.reconnectTimeWaitMs ?? 1_000;
  const reconnectJitter = options.reconnectJitterMs ?? 500;
  const connectOptions: NodeConnectionOptions = {
    servers: options.servers,
    name: options.name,
    maxReconnectAttempts: -1,
    reconnect: true,
    reconnectTimeWait,
    reconnectJitter,
    reconnectJitterTLS: reconnectJitter,
    timeout: options.connectTimeoutMs ?? 5_000,
    pingInterval: options.pingIntervalMs ?? 10_000,
    maxPingOut: 2,
    // The client's own waitOnFirstConnect retries a refused password forever; the loop below does not.
    waitOnFirstConnect: false,
    // No stack trace captured per request (a JetStream publish is one: its PubAck), only to
    // decorate a timeout's stack with where it was sent; the error itself is unchanged.
    noAsyncTraces: true,
    ...(auth.authenticator ? { authenticator: auth.authenticator } : {}),
    ...(auth.tls ? { tls: auth.tls } : {}),
  };
  let nc: NatsConnection | undefined;
  for (let attempt = 1; nc === undefined; attempt++) {
    try {
      nc = await connect(connectOptions);
    } catch (error) {
      if (isAuthRefusal(error)) {
        const from = auth.variables.length > 0 ? `the credentials from ${auth.variables.join(', ')}` : 'a connection without credentials (set NATS_CREDS, NATS_NKEY_SEED_FILE, NATS_USER + NATS_PASSWORD_FILE or NATS_TOKEN_FILE)';
        throw new WeirError('upstream_unavailable', `NATS refused ${from} (${options.name}): authorization violation`, { cause: error, retryable: false });
      }
      if (!options.waitOnFirstConnect) {
        throw new WeirError('upstream_unavailable', `cannot connect to NATS (${options.name})`, { cause: error, retryable: true });
      }
      if (attempt === 1 || attempt % 30 === 0) logger?.warn({ name: options.name, attempt, err: error }, 'nats not reachable yet; retrying');
      await new Promise((resolve) => setTimeout(resolve, reconnectTimeWait + Math.random() * reconnectJitter));
    }
  }
  if (logger) {
    logger.info({ name: options.name, server: nc.getServer(), auth: auth.method, tls: auth.tls !== undefined }, 'nats connected');
    void watchStatus(nc, options.name, logger);
  }
  return nc;
}

/** The server refused the client's credentials (or their absence), or they have expired. */
function isAuthRefusal(error: unknown): boolean {
  return error instanceof errors.AuthorizationError || error instanceof errors.UserAuthenticationExpiredError;
}

async function watchStatus(nc: NatsConnection, name: string, logger: MessagingLogger): Promise<void> {
  try {
    for await (const s of nc.status()) logStatus(logger, name, s);
  } catch (error) {
    logger.warn({ name, err: error }, 'nats status watcher ended');
  }
}

/** Maps one status event to a log line. Exhaustive over the client's status types. */
function logStatus(logger: MessagingLogger, name: string, s: Status): void {
  switch (s.type) {
    case 'disconnect':
      logger.warn({ name, server: s.server }, 'nats disconnected; reconnecting');
      return;
    case 'reconnect':
      logger.info({ name, server: s.server }, 'nats reconnected');
      return;
    case 'reconnecting':
      logger.debug({ name }, 'nats reconnect attempt');
      return;
    case 'error':
      logger.warn({ name, err: s.error }, 'nats error');
      return;
    case 'ldm':
      logger.warn({ name, server: s.server }, 'nats server entering lame duck mode');
      return;
    case 'staleConnection':
      logger.warn({ name }, 'nats connection stale');
      return;
    case 'slowConsumer':
      logger.warn({ name, subject: s.sub.getSubject(), pending: s.pending }, 'nats slow consumer');
      return;
    case 'forceReconnect':
      logger.info({ name }, 'nats forced reconnect');
      return;
    case 'close':
      logger.info({ name }, 'nats connection closed');
      return;
    case 'update':
    case 'ping':
      logger.debug({ name, type: s.type }, 'nats status');
      return;
    default: {
      const _never: never = s;
      return _never;
    }
  }
}
