/**
 * Limits on slow and greedy HTTP clients (docs/security.md §7): the settings, their defaults and
 * the environment variables that set them. {@link createClientGuard} enforces them.
 */
import { isIP } from 'node:net';
import { EnvError } from './env';

/** Limits on the public HTTP listener's clients. Times in ms; 0 turns a timeout off. */
export interface ClientLimits {
  /**
   * `WEIR_HEADERS_TIMEOUT_MS`: the whole request head (line and headers) must arrive within this
   * time of its first byte, else Node answers 408 and closes the connection (a slowloris that
   * trickles headers). Default 15,000.
   */
  headersTimeoutMs: number;
  /**
   * `WEIR_REQUEST_TIMEOUT_MS`: the whole request, body included, must arrive within this time of
   * its first byte (a client that trickles its body), else 408 and the connection is closed. The
   * response is not bounded by it (generations stream as long as they run). Default 60,000.
   */
  requestTimeoutMs: number;
  /** `WEIR_KEEP_ALIVE_TIMEOUT_MS`: an idle keep-alive connection is closed after this. Default 65,000 (above common load balancers' 60 s). */
  keepAliveTimeoutMs: number;
  /**
   * How often Node checks the header and request timeouts (ms): a slow request is cut between the
   * timeout and the timeout plus this. Default 1,000. Not an environment variable (tests shorten it).
   */
  timeoutCheckIntervalMs: number;
  /** `WEIR_MAX_CONNECTIONS`: open connections at once; beyond it, new ones are closed at once. Default 4,096. */
  maxConnections: number;
  /**
   * `WEIR_MAX_CONNECTIONS_PER_ADDRESS`: open connections of one client address (an IPv6 client's
   * /64) at once; beyond it, its new connections are closed at once. A client behind a trusted
   * proxy ({@link trustedProxies}) is capped at this many requests in flight instead (429). Default 256.
   */
  maxConnectionsPerAddress: number;
  /**
   * `WEIR_TRUSTED_PROXIES`: comma-separated addresses or CIDRs (`10.0.0.0/8, ::1`) of proxies
   * whose `X-Forwarded-For` is believed: a request from one is attributed to the rightmost
   * address in that header that is not itself a trusted proxy. From any other peer the header is
   * ignored. Default none.
   */
  trustedProxies: string[];
  /**
   * `WEIR_STREAM_STALL_MS`: a streamed (SSE) answer whose client stops reading — the socket's
   * buffer stays full — for this long is ended and its connection closed. Default 60,000.
   */
  streamStallMs: number;
  /**
   * `WEIR_AUTH_FAILURE_LIMIT`: failed authentications allowed per client address, and per API-key
   * prefix, within {@link authFailureWindowMs}; after that the address (or the prefix, but for a
   * key that already authenticated) gets 429 with `Retry-After` until the window ends. 0 turns
   * the throttle off. Default 20.
   */
  authFailureLimit: number;
  /** `WEIR_AUTH_FAILURE_WINDOW_MS`: the window of {@link authFailureLimit}. Default 60,000. */
  authFailureWindowMs: number;
}

/** The defaults of {@link ClientLimits}: well above what a benchmark's 64 keep-alive connections from one address need. */
export const DEFAULT_CLIENT_LIMITS: Readonly<ClientLimits> = Object.freeze({
  headersTimeoutMs: 15_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 65_000,
  timeoutCheckIntervalMs: 1_000,
  maxConnections: 4_096,
  maxConnectionsPerAddress: 256,
  trustedProxies: [],
  streamStallMs: 60_000,
  authFailureLimit: 20,
  authFailureWindowMs: 60_000,
});

/**
 * Reads {@link ClientLimits} from the environment (the variables named on each field; unset or
 * empty means the default: `defaults`, {@link DEFAULT_CLIENT_LIMITS} unless a listener has its own).
 * @throws EnvError naming every bad variable and what it expects.
 */
export function clientLimitsFromEnv(env: NodeJS.ProcessEnv, defaults: Readonly<ClientLimits> = DEFAULT_CLIENT_LIMITS): ClientLimits {
  const problems: string[] = [];
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === '') return fallback;
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      problems.push(`${name}: expected an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`);
      return fallback;
    }
    return n;
  };
  const d = defaults;
  const limits: ClientLimits = {
    headersTimeoutMs: int('WEIR_HEADERS_TIMEOUT_MS', d.headersTimeoutMs, 0, 3_600_000),
    requestTimeoutMs: int('WEIR_REQUEST_TIMEOUT_MS', d.requestTimeoutMs, 0, 3_600_000),
    keepAliveTimeoutMs: int('WEIR_KEEP_ALIVE_TIMEOUT_MS', d.keepAliveTimeoutMs, 0, 3_600_000),
    timeoutCheckIntervalMs: d.timeoutCheckIntervalMs,
    maxConnections: int('WEIR_MAX_CONNECTIONS', d.maxConnections, 1, 10_000_000),
    maxConnectionsPerAddress: int('WEIR_MAX_CONNECTIONS_PER_ADDRESS', d.maxConnectionsPerAddress, 1, 10_000_000),
    trustedProxies: env.WEIR_TRUSTED_PROXIES?.trim() ? [] : [...d.trustedProxies],
    streamStallMs: int('WEIR_STREAM_STALL_MS', d.streamStallMs, 0, 3_600_000),
    authFailureLimit: int('WEIR_AUTH_FAILURE_LIMIT', d.authFailureLimit, 0, 1_000_000),
    authFailureWindowMs: int('WEIR_AUTH_FAILURE_WINDOW_MS', d.authFailureWindowMs, 1_000, 86_400_000),
  };
  const proxies = env.WEIR_TRUSTED_PROXIES?.trim();
  if (proxies) {
    for (const entry of proxies.split(',').map((s) => s.trim()).filter(Boolean)) {
      const problem = cidrProblem(entry);
      if (problem) problems.push(`WEIR_TRUSTED_PROXIES: ${problem}`);
      else limits.trustedProxies.push(entry);
    }
  }
  if (limits.headersTimeoutMs > 0 && limits.requestTimeoutMs > 0 && limits.headersTimeoutMs > limits.requestTimeoutMs) {
    problems.push('WEIR_HEADERS_TIMEOUT_MS: must not exceed WEIR_REQUEST_TIMEOUT_MS (the request timeout covers the headers too)');
  }
  if (problems.length > 0) throw new EnvError(problems);
  return limits;
}

/** Why `entry` is not an address or CIDR (`10.0.0.0/8`, `::1`, `fd00::/8`); undefined when it is one. */
export function cidrProblem(entry: string): string | undefined {
  const slash = entry.indexOf('/');
  const address = slash < 0 ? entry : entry.slice(0, slash);
  const family = isIP(address);
  if (family === 0) return `${JSON.stringify(entry)} is not an IP address or CIDR (e.g. 10.0.0.0/8 or fd00::/8)`;
  if (slash < 0) return undefined;
  const bits = entry.slice(slash + 1);
  const max = family === 4 ? 32 : 128;
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > max) return `${JSON.stringify(entry)}: the prefix length must be 0 to ${max}`;
  return undefined;
}
