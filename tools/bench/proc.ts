/**
 * Process accounting from /proc (Linux): CPU time (utime + stime of every thread, in clock
 * ticks converted with `getconf CLK_TCK`), resident memory, and CPU affinity.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';

let ticks: number | undefined;

/** Clock ticks per second (`getconf CLK_TCK`; 100 on almost every Linux). */
export function clockTicks(): number {
  if (ticks === undefined) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticks = 100;
    }
  }
  return ticks;
}

/** CPU seconds (user and system, all threads) a process has used so far; NaN if it is gone. */
export function cpuTimes(pid: number): { user: number; system: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { user: Number(rest[14 - 3]) / clockTicks(), system: Number(rest[15 - 3]) / clockTicks() };
  } catch {
    return { user: Number.NaN, system: Number.NaN };
  }
}

/** CPU seconds (user + system, all threads) a process has used so far; NaN if it is gone. */
export function cpuSeconds(pid: number): number {
  const t = cpuTimes(pid);
  return t.user + t.system;
}

/** Fields of /proc/<pid>/status in kB (VmRSS, VmHWM) or as text (Cpus_allowed_list). */
function statusField(pid: number, field: string): string | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const line = status.split('\n').find((l) => l.startsWith(`${field}:`));
    return line?.slice(field.length + 1).trim();
  } catch {
    return undefined;
  }
}

/** Resident set size in MiB (VmRSS). */
export function rssMiB(pid: number): number {
  const v = statusField(pid, 'VmRSS');
  return v ? Number(v.replace(/\s*kB$/, '')) / 1024 : Number.NaN;
}

/** Peak resident set size in MiB (VmHWM). */
export function peakRssMiB(pid: number): number {
  const v = statusField(pid, 'VmHWM');
  return v ? Number(v.replace(/\s*kB$/, '')) / 1024 : Number.NaN;
}

/** The CPUs a process may run on, e.g. `1` or `0-1`. */
export function cpusAllowed(pid: number): string {
  return statusField(pid, 'Cpus_allowed_list') ?? '?';
}

/** Path of taskset, or undefined when it is not installed. */
export function tasksetPath(): string | undefined {
  try {
    const p = execFileSync('sh', ['-c', 'command -v taskset'], { encoding: 'utf8' }).trim();
    return p && existsSync(p) ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Pins every thread of `pid` to `cpu` (taskset -a -cp). Returns false if that failed. */
export function pin(pid: number, cpu: number): boolean {
  const taskset = tasksetPath();
  if (!taskset) return false;
  try {
    execFileSync(taskset, ['-a', '-cp', String(cpu), String(pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Pids of running processes whose command line contains `needle` (for "is someone else running X"). */
export function pidsMatching(needle: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (cmd.includes(needle)) found.push(Number(entry));
    } catch {
      // gone
    }
  }
  return found;
}

/** Where a process's resident memory is, from /proc/<pid>/smaps (MiB). */
export interface MemoryBreakdown {
  /** VmRSS and its peak VmHWM. */
  rssMiB: number;
  peakRssMiB: number;
  /**
   * Anonymous read-write mappings of ≥ 100 MiB: WebAssembly memories (PGlite's: 128 MiB
   * reserved at start, resident as far as Postgres touched it). V8's heap never maps that much
   * at once here.
   */
  wasmMemoryMiB: number;
  /** glibc's thread arenas (anonymous read-write mappings ≤ 64 MiB aligned on 64 MiB): native allocations of V8's and libuv's threads, e.g. compiling WASM. */
  mallocArenasMiB: number;
  /** glibc's main arena (`[heap]`): native allocations of the main thread. */
  mainArenaMiB: number;
  /** Anonymous executable mappings: JIT and WASM code. */
  codeMiB: number;
  /** Every other anonymous mapping: V8's JavaScript heap pages, thread stacks, buffers. */
  otherAnonMiB: number;
  /** The node executable's file pages (shared with every node process, counted in RSS all the same). */
  nodeBinaryMiB: number;
  /** Other file-backed pages (shared libraries, native add-ons, mapped files). */
  otherFileMiB: number;
  /** Native add-ons and shared libraries mapped from node_modules (e.g. node-llama-cpp's), relative to node_modules. */
  nodeModulesMapped: string[];
}

/** {@link MemoryBreakdown} of `pid`; throws when the process is gone. */
export function memoryBreakdown(pid: number): MemoryBreakdown {
  const text = readFileSync(`/proc/${pid}/smaps`, 'utf8');
  const out: MemoryBreakdown = { rssMiB: rssMiB(pid), peakRssMiB: peakRssMiB(pid), wasmMemoryMiB: 0, mallocArenasMiB: 0, mainArenaMiB: 0, codeMiB: 0, otherAnonMiB: 0, nodeBinaryMiB: 0, otherFileMiB: 0, nodeModulesMapped: [] };
  const mapped = new Set<string>();
  const node = process.execPath;
  let cur: { start: bigint; sizeKiB: number; perm: string; name: string } | undefined;
  const MIB64 = 64n * 1024n * 1024n;
  const add = (kib: number) => {
    if (!cur) return;
    const mib = kib / 1024;
    const { name, perm, start, sizeKiB } = cur;
    if (name.startsWith('/')) {
      if (name === node || name === '/usr/bin/node' || name.endsWith('/bin/node')) out.nodeBinaryMiB += mib;
      else out.otherFileMiB += mib;
      const i = name.indexOf('/node_modules/');
      if (i >= 0) mapped.add(name.slice(i + '/node_modules/'.length));
    } else if (name === '[heap]') out.mainArenaMiB += mib;
    else if (name.startsWith('[')) out.otherAnonMiB += mib;
    else if (perm.includes('x')) out.codeMiB += mib;
    else if (perm.startsWith('rw') && sizeKiB >= 100 * 1024) out.wasmMemoryMiB += mib;
    else if (perm.startsWith('rw') && start % MIB64 === 0n && sizeKiB <= 64 * 1024) out.mallocArenasMiB += mib;
    else out.otherAnonMiB += mib;
  };
  for (const line of text.split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (m) {
      const start = BigInt(`0x${m[1]}`);
      cur = { start, sizeKiB: Number((BigInt(`0x${m[2]}`) - start) / 1024n), perm: m[3], name: m[4] };
      continue;
    }
    const r = /^Rss:\s+(\d+) kB/.exec(line);
    if (r) add(Number(r[1]));
  }
  out.nodeModulesMapped = [...mapped].sort();
  return out;
}
