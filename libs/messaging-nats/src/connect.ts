import { connect, type NatsConnection, type Status } from '@nats-io/transport-node';
import { WeirError } from '@weir/core';
import type { MessagingLogger } from '@weir/messaging';

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
}

/**
 * Connects to NATS for Weir: reconnects forever (`maxReconnectAttempts: -1`) with a bounded
 * wait between attempts (`reconnectTimeWaitMs` + up to `reconnectJitterMs`), and logs status
 * changes (disconnect and error at warn, reconnect at info, close at info) in the background.
 * While disconnected the client buffers publishes and resends them after reconnecting; callers
 * that need durability (the usage sink) still await JetStream acks.
 * @throws WeirError `upstream_unavailable` (retryable) when the first connect fails and
 *   `waitOnFirstConnect` is false; the NATS error is the `cause`.
 */
export async function connectNats(options: ConnectNatsOptions): Promise<NatsConnection> {
  const { logger } = options;
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: options.servers,
      name: options.name,
      maxReconnectAttempts: -1,
      reconnect: true,
      reconnectTimeWait: options.reconnectTimeWaitMs ?? 1_000,
      reconnectJitter: options.reconnectJitterMs ?? 500,
      timeout: options.connectTimeoutMs ?? 5_000,
      pingInterval: options.pingIntervalMs ?? 10_000,
      maxPingOut: 2,
      waitOnFirstConnect: options.waitOnFirstConnect ?? false,
      // No stack trace captured per request (a JetStream publish is one: its PubAck), only to
      // decorate a timeout's stack with where it was sent; the error itself is unchanged.
      noAsyncTraces: true,
    });
  } catch (error) {
    throw new WeirError('upstream_unavailable', `cannot connect to NATS (${options.name})`, { cause: error, retryable: true });
  }
  if (logger) {
    logger.info({ name: options.name, server: nc.getServer() }, 'nats connected');
    void watchStatus(nc, options.name, logger);
  }
  return nc;
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
