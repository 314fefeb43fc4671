/**
 * Active health checking of replicas: every `intervalMs` each replica is probed (the probe
 * is injected: an HTTP `/healthz` call in the scheduler service, a fake in tests). After
 * `failuresToEject` consecutive failures a replica is reported unhealthy; one success
 * reports it healthy again. A hung replica (SIGSTOP) fails by timeout, a killed one by
 * connection refusal, so both leave rotation within about
 * `failuresToEject × intervalMs + timeoutMs`.
 */

/** Options of {@link createReplicaProber}. */
export interface ReplicaProberOptions {
  replicaIds: readonly string[];
  /** Resolves true when the replica answered healthy within `timeoutMs`; false or a rejection is a failure. */
  probe(replicaId: string, timeoutMs: number): Promise<boolean>;
  /** Default 1,000 ms. */
  intervalMs?: number;
  /** Default 1,000 ms. */
  timeoutMs?: number;
  /** Consecutive failures before a replica is ejected. Default 3. */
  failuresToEject?: number;
  /**
   * A replica that has never answered is not ejected by probes during this long after the
   * prober starts (ms): replicas that start together with the scheduler are still loading
   * their model. Default 30,000. (A request that hits one still fails fast and is reported.)
   */
  startupGraceMs?: number;
  /** Clock for the startup grace (ms). Default `Date.now`. */
  now?: () => number;
  /** Called on each change of state (not on every probe). */
  onChange(replicaId: string, healthy: boolean, reason: string): void;
}

/** A running prober. */
export interface ReplicaProber {
  /** Runs one round now (tests and startup). */
  probeAll(): Promise<void>;
  /** Per replica: answering probes now (has answered, and is not ejected). */
  status(): Record<string, { up: boolean }>;
  /**
   * Records that someone else (a relay that could not reach it) saw the replica fail: it
   * counts as ejected, so the next successful probe reports it recovered.
   */
  markUnhealthy(replicaId: string): void;
  stop(): void;
}

/** Starts probing (the first round runs after `intervalMs`; call `probeAll()` for one now). */
export function createReplicaProber(options: ReplicaProberOptions): ReplicaProber {
  const intervalMs = options.intervalMs ?? 1_000;
  const timeoutMs = options.timeoutMs ?? 1_000;
  const failuresToEject = options.failuresToEject ?? 3;
  const now = options.now ?? Date.now;
  const graceUntil = now() + (options.startupGraceMs ?? 30_000);
  const state = new Map(options.replicaIds.map((id) => [id, { healthy: true, failures: 0, seenUp: false }]));
  let running = false;

  const probeOne = async (id: string) => {
    const s = state.get(id);
    if (!s) return;
    let ok = false;
    let reason = 'probe_failed';
    try {
      ok = await withTimeout(options.probe(id, timeoutMs), timeoutMs);
    } catch (err) {
      reason = err instanceof ProbeTimeout ? 'probe_timeout' : 'probe_error';
    }
    if (ok) {
      s.failures = 0;
      s.seenUp = true;
      if (!s.healthy) {
        s.healthy = true;
        options.onChange(id, true, 'recovered');
      }
      return;
    }
    s.failures++;
    if (!s.seenUp && now() < graceUntil) return; // still starting up
    if (s.healthy && s.failures >= failuresToEject) {
      s.healthy = false;
      options.onChange(id, false, reason);
    }
  };

  const probeAll = async () => {
    if (running) return; // a slow round never overlaps the next
    running = true;
    try {
      await Promise.all([...state.keys()].map(probeOne));
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void probeAll(), intervalMs);
  timer.unref();
  return {
    probeAll,
    status() {
      const out: Record<string, { up: boolean }> = {};
      for (const [id, st] of state) out[id] = { up: st.seenUp && st.healthy };
      return out;
    },
    markUnhealthy(replicaId) {
      const s = state.get(replicaId);
      if (!s) return;
      s.failures = Math.max(s.failures, failuresToEject);
      s.healthy = false;
    },
    stop: () => clearInterval(timer),
  };
}

class ProbeTimeout extends Error {}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new ProbeTimeout()), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}
