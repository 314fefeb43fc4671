/**
 * Enforces {@link ClientLimits} on the public HTTP listener (docs/security.md §7):
 *
 * - Node's own header and request timeouts (408 and close), the keep-alive idle timeout and the
 *   global connection cap (`server.maxConnections`: new sockets beyond it are closed at once);
 * - a cap per client address, counted on the server's `connection` event (nothing per request):
 *   a socket beyond its address's cap is closed at once. An IPv6 client is its /64.
 * - behind a trusted proxy (its peer address in `trustedProxies`), the client is the rightmost
 *   `X-Forwarded-For` entry that is not a trusted proxy; the proxy's sockets count only against
 *   the global cap, and each forwarded client is capped at `maxConnectionsPerAddress` requests in
 *   flight (429 beyond it) — the one check made per request, and only on a proxy's sockets;
 * - the failed-authentication throttle ({@link createAuthThrottle}), keyed by the same client.
 *
 * Cost on the request path: one branch per request without trusted proxies; a `WeakSet` lookup
 * per request with them (plus the header walk and a map update for requests from a proxy).
 */
import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import { BlockList, isIPv4 } from 'node:net';
import type { Socket } from 'node:net';
import { WeirError } from '@weir/core';
import { type AuthThrottle, createAuthThrottle } from './auth-throttle';
import type { ClientLimits } from './client-limits';

/** What a guard has counted, for tests and the ops endpoints. */
export interface ClientGuardStats {
  /** Open connections counted per address (proxies' excluded), summed. */
  connections: number;
  /** Connections closed at once because their address was at its cap. */
  refusedConnections: number;
  /** Requests refused because their forwarded client was at its cap. */
  refusedRequests: number;
}

/** The guard of one HTTP listener (see the module comment). */
export interface ClientGuard {
  readonly limits: Readonly<ClientLimits>;
  /** Options for `http.createServer(options, handler)`: the timeouts and how often Node checks them. */
  readonly serverOptions: ServerOptions;
  /** Applies the timeouts, the global cap and per-address counting to `server` (call once, before `listen`). */
  attach(server: Server): void;
  /** The client's address as the limits see it: the peer, or the forwarded client behind a trusted proxy (IPv4-mapped IPv6 unwrapped). */
  clientAddress(req: IncomingMessage): string;
  /**
   * Per request: undefined to go on, or the refusal (429 `rate_limited` with `retryAfterMs`) of a
   * forwarded client at its cap of requests in flight. Counts the request until `res` closes.
   */
  enter(req: IncomingMessage, res: ServerResponse): WeirError | undefined;
  /** The failed-authentication throttle, keyed by {@link ClientGuard.clientKey}. */
  readonly auth: AuthThrottle;
  /** The key the caps and the throttle count a client under: its address, an IPv6 address's /64. */
  clientKey(req: IncomingMessage): string;
  stats(): ClientGuardStats;
  /** Stops timers. */
  close(): void;
}

/** Dependencies of {@link createClientGuard}. */
export interface ClientGuardDeps {
  /** Clock (ms) for the throttle's windows. Default `Date.now`. */
  now?: () => number;
}

/** `::ffff:10.0.0.1` → `10.0.0.1`; other addresses unchanged. */
export function normalizeAddress(address: string): string {
  return address.startsWith('::ffff:') && isIPv4(address.slice(7)) ? address.slice(7) : address;
}

/** The key a client is counted under: an IPv4 address as is, an IPv6 address's first 64 bits (`2001:db8:0:1::/64`). */
export function addressKey(address: string): string {
  if (!address.includes(':')) return address;
  const zone = address.indexOf('%');
  const bare = zone < 0 ? address : address.slice(0, zone);
  const [head, tail] = bare.split('::');
  const left = head ? head.split(':') : [];
  const right = tail !== undefined && tail !== '' ? tail.split(':') : [];
  const groups = tail === undefined ? left : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => (g.replace(/^0+/, '') || '0').toLowerCase())
    .join(':')}::/64`;
}

/** Builds a {@link BlockList} of `cidrs` (already validated: `clientLimitsFromEnv`). */
function blockListOf(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of cidrs) {
    const slash = entry.indexOf('/');
    const address = normalizeAddress(slash < 0 ? entry : entry.slice(0, slash));
    const type = isIPv4(address) ? 'ipv4' : 'ipv6';
    list.addSubnet(address, slash < 0 ? (type === 'ipv4' ? 32 : 128) : Number(entry.slice(slash + 1)), type);
  }
  return list;
}

/** Creates the guard of one listener. */
export function createClientGuard(limits: ClientLimits, deps: ClientGuardDeps = {}): ClientGuard {
  const perAddress = limits.maxConnectionsPerAddress;
  const proxies = limits.trustedProxies.length > 0 ? blockListOf(limits.trustedProxies) : undefined;
  const trusted = (address: string) => (proxies as BlockList).check(address, isIPv4(address) ? 'ipv4' : 'ipv6');
  /** Sockets whose peer is a trusted proxy. */
  const proxySockets = new WeakSet<Socket>();
  /** Open connections per address key (direct peers only). */
  const open = new Map<string, number>();
  /** Requests in flight per forwarded client key. */
  const inFlight = new Map<string, number>();
  let connections = 0;
  let refusedConnections = 0;
  let refusedRequests = 0;
  const auth = createAuthThrottle({ limit: limits.authFailureLimit, windowMs: limits.authFailureWindowMs, ...(deps.now ? { now: deps.now } : {}) });

  const decrement = (map: Map<string, number>, key: string) => {
    const n = (map.get(key) ?? 1) - 1;
    if (n <= 0) map.delete(key);
    else map.set(key, n);
  };

  const clientAddress = (req: IncomingMessage): string => {
    const peer = normalizeAddress(req.socket.remoteAddress ?? '');
    if (!proxies || !proxySockets.has(req.socket)) return peer;
    const header = req.headers['x-forwarded-for'];
    if (header === undefined) return peer;
    const hops = (Array.isArray(header) ? header.join(',') : header).split(',');
    // Right to left: each trusted proxy appended the address it saw; the first untrusted one is the client.
    let client = peer;
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = normalizeAddress(hops[i].trim());
      if (hop === '' || (!isIPv4(hop) && !hop.includes(':'))) break; // not an address: stop at the last good hop
      client = hop;
      if (!trusted(hop)) break;
    }
    return client;
  };
  const clientKey = (req: IncomingMessage) => addressKey(clientAddress(req));

  return {
    limits,
    serverOptions: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: limits.timeoutCheckIntervalMs,
    },
    attach(server) {
      server.headersTimeout = limits.headersTimeoutMs;
      server.requestTimeout = limits.requestTimeoutMs;
      server.keepAliveTimeout = limits.keepAliveTimeoutMs;
      server.maxConnections = limits.maxConnections;
      server.on('connection', (socket: Socket) => {
        const address = socket.remoteAddress;
        if (address === undefined) return; // already gone
        const peer = normalizeAddress(address);
        if (proxies && trusted(peer)) {
          proxySockets.add(socket);
          return;
        }
        const key = addressKey(peer);
        const n = (open.get(key) ?? 0) + 1;
        if (n > perAddress) {
          refusedConnections++;
          socket.destroy();
          return;
        }
        open.set(key, n);
        connections++;
        socket.once('close', () => {
          connections--;
          decrement(open, key);
        });
      });
    },
    clientAddress,
    clientKey,
    enter(req, res) {
      if (!proxies || !proxySockets.has(req.socket)) return undefined;
      const key = clientKey(req);
      const n = (inFlight.get(key) ?? 0) + 1;
      if (n > perAddress) {
        refusedRequests++;
        return new WeirError('rate_limited', `Too many requests in flight from your address (at most ${perAddress}); retry when some have finished.`, { retryable: true, retryAfterMs: 1_000 });
      }
      inFlight.set(key, n);
      res.once('close', () => decrement(inFlight, key));
      return undefined;
    },
    auth,
    stats: () => ({ connections, refusedConnections, refusedRequests }),
    close() {
      auth.close();
    },
  };
}
