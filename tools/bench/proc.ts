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
