/**
 * What mutual TLS costs the split's gRPC hops (issue 14 part 8), measured in one process so a
 * loaded machine disturbs it less than the full split benchmark: an admission server and a
 * gateway-side client on loopback, `Reserve` over the multiplexed stream (the default) and over
 * plain calls, plaintext against mutual TLS (the launcher's development certificates, ECDSA
 * P-256). Reports CPU µs per call (client + server, this process's `cpuUsage`), p50/p99
 * latency at concurrency 1 and 16, and the CPU and time of a new connection's first call
 * (TCP + TLS handshake + HTTP/2 + mux stream setup).
 *
 *   node --import tsx tools/bench/grpc-tls.ts [--calls N] [--rounds N]
 *
 * A benchmark, not a test: nothing is asserted. Numbers on a machine with other load are noisy;
 * the report prints the load average.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { AdmissionService, ReservationRequest } from '@weir/core';
import { issueDevPki, loadServiceTls, type ServiceTls } from '@weir/service-tls';
import { createAdmissionGrpcClient, createAdmissionGrpcServer, startGrpcServer } from '@weir/transport-grpc';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const CALLS = Number(value('--calls') ?? 4_000);
const ROUNDS = Number(value('--rounds') ?? 3);

const request: ReservationRequest = {
  caller: { tenantId: 'acme', appId: 'web', apiKeyId: 'key_1' },
  requestId: 'req_1',
  generationId: 'gen_1',
  expiresAtMs: Date.now() + 3_600_000,
  inputTokens: 12,
  maxOutputTokens: 34,
  worstCaseCostNanoUsd: 9_007_199_254,
};
const admission: AdmissionService = {
  reserve: async () => ({ ok: true, reservationId: 'rsv_1' }),
  settle: async () => undefined,
  release: async () => undefined,
};

interface Cell {
  tls: boolean;
  mux: boolean;
  concurrency: number;
  cpuUsPerCall: number;
  p50Ms: number;
  p99Ms: number;
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function measure(address: string, tls: { client: ServiceTls } | undefined, mux: boolean, concurrency: number): Promise<Cell> {
  const client = createAdmissionGrpcClient({ address, mux, ...(tls ? { tls: tls.client } : {}) });
  try {
    for (let i = 0; i < 500; i++) await client.reserve(request); // warm the connection and the JIT
    const latencies: number[] = [];
    const cpu0 = process.cpuUsage();
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < CALLS) {
          const t = performance.now();
          await client.reserve(request);
          latencies.push(performance.now() - t);
        }
      }),
    );
    const cpu = process.cpuUsage(cpu0);
    latencies.sort((a, b) => a - b);
    return { tls: tls !== undefined, mux, concurrency, cpuUsPerCall: (cpu.user + cpu.system) / CALLS, p50Ms: pct(latencies, 50), p99Ms: pct(latencies, 99) };
  } finally {
    client.close();
  }
}

async function firstCall(address: string, tls: ServiceTls | undefined): Promise<{ cpuUs: number; ms: number }> {
  const cpu0 = process.cpuUsage();
  const t = performance.now();
  const client = createAdmissionGrpcClient({ address, ...(tls ? { tls } : {}) });
  await client.reserve(request);
  const ms = performance.now() - t;
  const cpu = process.cpuUsage(cpu0);
  client.close();
  return { cpuUs: cpu.user + cpu.system, ms };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'weir-grpc-tls-bench-'));
  try {
    const pki = await issueDevPki({ dir, certificates: [{ name: 'gateway' }, { name: 'admission' }] });
    const gateway = loadServiceTls(pki.env('gateway'), { service: 'gateway' }) as ServiceTls;
    const admissionTls = loadServiceTls(pki.env('admission'), { service: 'admission', defaultPeers: ['gateway'] }) as ServiceTls;
    const plain = await startGrpcServer({ services: [createAdmissionGrpcServer(admission)] });
    const secure = await startGrpcServer({ services: [createAdmissionGrpcServer(admission)], tls: admissionTls });
    const cells: Cell[] = [];
    const loadStart = os.loadavg();
    for (let round = 0; round < ROUNDS; round++) {
      for (const mux of [true, false]) {
        for (const concurrency of [1, 16]) {
          // Alternate the order so drift in the machine's load hits both sides alike.
          const order = round % 2 === 0 ? [false, true] : [true, false];
          for (const useTls of order) cells.push(await measure(useTls ? secure.address : plain.address, useTls ? { client: gateway } : undefined, mux, concurrency));
        }
      }
    }
    const firsts = { plain: [] as { cpuUs: number; ms: number }[], tls: [] as { cpuUs: number; ms: number }[] };
    for (let i = 0; i < 20; i++) {
      firsts.plain.push(await firstCall(plain.address, undefined));
      firsts.tls.push(await firstCall(secure.address, gateway));
    }
    await plain.close();
    await secure.close();
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const lines = [
      `grpc-tls: ${CALLS} Reserve calls per cell, ${ROUNDS} rounds (median shown), node ${process.version}, load average ${loadStart.map((x) => x.toFixed(2)).join(' ')} → ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`,
      '',
      '| transport | c | plaintext CPU µs/call | mTLS CPU µs/call | Δ | plaintext p50 / p99 ms | mTLS p50 / p99 ms |',
      '|---|---|---|---|---|---|---|',
    ];
    for (const mux of [true, false]) {
      for (const c of [1, 16]) {
        const pick = (t: boolean) => cells.filter((x) => x.tls === t && x.mux === mux && x.concurrency === c);
        const [p, s] = [pick(false), pick(true)];
        const cpuP = median(p.map((x) => x.cpuUsPerCall));
        const cpuS = median(s.map((x) => x.cpuUsPerCall));
        lines.push(
          `| ${mux ? 'mux' : 'plain calls'} | ${c} | ${cpuP.toFixed(1)} | ${cpuS.toFixed(1)} | ${cpuS - cpuP >= 0 ? '+' : ''}${(cpuS - cpuP).toFixed(1)} (${(((cpuS - cpuP) / cpuP) * 100).toFixed(0)} %) | ${median(p.map((x) => x.p50Ms)).toFixed(3)} / ${median(p.map((x) => x.p99Ms)).toFixed(3)} | ${median(s.map((x) => x.p50Ms)).toFixed(3)} / ${median(s.map((x) => x.p99Ms)).toFixed(3)} |`,
        );
      }
    }
    lines.push(
      '',
      `new connection, first call (median of 20): plaintext ${median(firsts.plain.map((x) => x.ms)).toFixed(2)} ms / ${median(firsts.plain.map((x) => x.cpuUs)).toFixed(0)} µs CPU; mTLS ${median(firsts.tls.map((x) => x.ms)).toFixed(2)} ms / ${median(firsts.tls.map((x) => x.cpuUs)).toFixed(0)} µs CPU`,
    );
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exit(1);
});
