/**
 * A minimal Chrome DevTools Protocol client for a Node process started with
 * `--inspect=127.0.0.1:0` (its stderr says `Debugger listening on ws://…`): the V8 CPU profiler
 * (`run.ts --profile` profiles exactly the measurement windows, in any process of a topology),
 * full garbage collections and expressions evaluated in the process (`idle-memory.ts`,
 * `soak.ts`: heap after GC, `process.memoryUsage()`).
 */
import { WebSocket } from 'undici';

/** The inspector WebSocket URL a process printed, if any. */
export function findInspectorUrl(output: string[]): string | undefined {
  for (const line of output) {
    const m = /Debugger listening on (ws:\/\/\S+)/.exec(line);
    if (m) return m[1];
  }
  return undefined;
}

export interface CpuProfiler {
  start(): Promise<void>;
  /** Stops and returns the profile (`.cpuprofile` JSON). */
  stop(): Promise<unknown>;
  /** Runs a full garbage collection and returns the JS heap in use after it (bytes). */
  heapUsedAfterGc(): Promise<number>;
  close(): void;
}

/** A Chrome DevTools Protocol session with one process. */
export interface InspectorSession {
  /** Sends one protocol command and resolves with its result. */
  call(method: string, params?: Record<string, unknown>): Promise<unknown>;
  /** Evaluates `expression` in the process's main context and returns its value (JSON-serialisable). */
  evaluate<T>(expression: string): Promise<T>;
  /** A full garbage collection (HeapProfiler.collectGarbage). */
  collectGarbage(): Promise<void>;
  close(): void;
}

/** Connects to a process's inspector (`ws://…` from {@link findInspectorUrl}). */
export async function connectInspector(wsUrl: string): Promise<InspectorSession> {
  const ws = new WebSocket(wsUrl);
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener('open', () => resolve(), { once: true });
    ws.addEventListener('error', (e) => reject(new Error(`inspector ${wsUrl}: ${String((e as { message?: string }).message ?? 'connection failed')}`)), { once: true });
  });
  let nextId = 1;
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  ws.addEventListener('message', (ev) => {
    const msg = JSON.parse(String(ev.data)) as { id?: number; result?: unknown; error?: { message: string } };
    if (msg.id === undefined) return;
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.error) p.reject(new Error(msg.error.message));
    else p.resolve(msg.result);
  });
  const call = (method: string, params: Record<string, unknown> = {}) =>
    new Promise<unknown>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });
  return {
    call,
    async evaluate<T>(expression: string) {
      const r = (await call('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true })) as { result?: { value?: unknown }; exceptionDetails?: { text?: string; exception?: { description?: string } } };
      if (r.exceptionDetails) throw new Error(`inspector evaluate failed: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text ?? 'exception'}`);
      return r.result?.value as T;
    },
    async collectGarbage() {
      await call('HeapProfiler.collectGarbage');
    },
    close: () => ws.close(),
  };
}

/** Connects to a process's inspector and enables its profiler (sampling every `intervalUs`). */
export async function connectProfiler(wsUrl: string, intervalUs = 250): Promise<CpuProfiler> {
  const session = await connectInspector(wsUrl);
  const call = session.call;
  await call('Profiler.enable');
  await call('Profiler.setSamplingInterval', { interval: intervalUs });
  return {
    start: async () => {
      await call('Profiler.start');
    },
    stop: async () => ((await call('Profiler.stop')) as { profile: unknown }).profile,
    heapUsedAfterGc: async () => {
      await call('HeapProfiler.collectGarbage');
      return ((await call('Runtime.getHeapUsage')) as { usedSize: number }).usedSize;
    },
    close: () => session.close(),
  };
}
