/**
 * Summarizes a V8 `.cpuprofile` (from `node --cpu-prof`): self time by function, and self
 * and inclusive time by package (`node_modules/<pkg>`, `libs/<lib>`, `apps/<app>`, Node's
 * internals, GC), as shares of the non-idle time.
 *
 * CLI: `node --import tsx tools/bench/cpuprofile-summary.ts <file.cpuprofile> [top]`, or with
 * `--match <regex>` (repeatable) the inclusive share of the frames each pattern matches.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  startTime: number;
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The package a frame belongs to. */
export function packageOf(url: string, functionName: string): string {
  if (!url) {
    if (functionName.startsWith('(')) return functionName; // (garbage collector), (program), (idle), (root)
    return '(native)';
  }
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const parts = url.slice(nm + 'node_modules/'.length).split('/');
    return parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
  }
  const lib = /\/(libs|apps)\/([^/]+)\//.exec(url);
  if (lib) return `${lib[1]}/${lib[2]}`;
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[0]}`;
  return url.replace(/^file:\/\//, '');
}

function shortUrl(url: string): string {
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) return url.slice(nm + 'node_modules/'.length);
  const m = /\/((?:libs|apps)\/.*)$/.exec(url);
  return m ? m[1] : url.replace(/^file:\/\//, '');
}

export interface ProfileSummary {
  totalMs: number;
  idleMs: number;
  functions: { name: string; selfMs: number; share: number }[];
  /** Time with the function anywhere on the stack. */
  functionsInclusive: { name: string; ms: number; share: number }[];
  packagesSelf: { name: string; ms: number; share: number }[];
  packagesInclusive: { name: string; ms: number; share: number }[];
}

/**
 * @param windows when given, only samples whose timestamp (µs, CLOCK_MONOTONIC, as V8 records
 *   them) falls inside one of these [start, end] windows count.
 */
export function summarizeProfile(profile: CpuProfile, top = 25, windows?: [number, number][]): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  // timeDeltas[i] is the time between sample i-1 and sample i; attribute it to sample i.
  let ts = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    ts += profile.timeDeltas[i] ?? 0;
    if (windows && !windows.some(([a, b]) => ts >= a && ts <= b)) continue;
    const id = profile.samples[i];
    self.set(id, (self.get(id) ?? 0) + Math.max(0, profile.timeDeltas[i] ?? 0));
  }
  let total = 0;
  let idle = 0;
  const fn = new Map<string, number>();
  const pkgSelf = new Map<string, number>();
  const pkgIncl = new Map<string, number>();
  const fnIncl = new Map<string, number>();
  const keyOf = (n: ProfileNode) => {
    const { functionName, url, lineNumber } = n.callFrame;
    return `${functionName || '(anonymous)'} ${url ? `${shortUrl(url)}:${lineNumber + 1}` : ''}`.trim();
  };
  for (const [id, us] of self) {
    const node = byId.get(id);
    if (!node) continue;
    const { functionName, url } = node.callFrame;
    if (functionName === '(idle)') {
      idle += us;
      continue;
    }
    total += us;
    const key = keyOf(node);
    fn.set(key, (fn.get(key) ?? 0) + us);
    const pkg = packageOf(url, functionName);
    pkgSelf.set(pkg, (pkgSelf.get(pkg) ?? 0) + us);
    // Inclusive: each package on the stack once.
    const seen = new Set<string>();
    const seenFn = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const n = byId.get(cur);
      if (!n) break;
      const p = packageOf(n.callFrame.url, n.callFrame.functionName);
      if (p === '(root)') continue;
      seen.add(p);
      seenFn.add(keyOf(n));
    }
    for (const p of seen) pkgIncl.set(p, (pkgIncl.get(p) ?? 0) + us);
    for (const f of seenFn) fnIncl.set(f, (fnIncl.get(f) ?? 0) + us);
  }
  const rows = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: us / 1000, share: total > 0 ? us / total : 0 }));
  return {
    totalMs: total / 1000,
    idleMs: idle / 1000,
    functions: rows(fn).map((r) => ({ name: r.name, selfMs: r.ms, share: r.share })),
    functionsInclusive: rows(fnIncl),
    packagesSelf: rows(pkgSelf),
    packagesInclusive: rows(pkgIncl),
  };
}

export function formatProfileSummary(title: string, s: ProfileSummary): string {
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
  const lines = [`## ${title}`, '', `non-idle CPU in profile: ${s.totalMs.toFixed(0)} ms (idle ${s.idleMs.toFixed(0)} ms)`, ''];
  lines.push('### self time by function', '', '| share | self ms | function |', '|---:|---:|---|');
  for (const f of s.functions) lines.push(`| ${pct(f.share)} | ${f.selfMs.toFixed(1)} | \`${f.name}\` |`);
  lines.push('', '### inclusive time by function (on the stack)', '', '| share | ms | function |', '|---:|---:|---|');
  for (const f of s.functionsInclusive) lines.push(`| ${pct(f.share)} | ${f.ms.toFixed(1)} | \`${f.name}\` |`);
  lines.push('', '### by package: self and inclusive (on the stack)', '', '| package | self | inclusive |', '|---|---:|---:|');
  const incl = new Map(s.packagesInclusive.map((p) => [p.name, p.share]));
  const names = [...new Set([...s.packagesSelf.map((p) => p.name), ...s.packagesInclusive.map((p) => p.name)])];
  const selfMap = new Map(s.packagesSelf.map((p) => [p.name, p.share]));
  names.sort((a, b) => (incl.get(b) ?? 0) - (incl.get(a) ?? 0));
  for (const n of names) lines.push(`| ${n} | ${selfMap.has(n) ? pct(selfMap.get(n) as number) : '—'} | ${incl.has(n) ? pct(incl.get(n) as number) : '—'} |`);
  lines.push('');
  return lines.join('\n');
}

/**
 * Share of the non-idle time with a frame matching each pattern on the stack (inclusive, so
 * patterns overlap). A frame reads `<function> <package path>:<line>`, e.g.
 * `generate libs/engines/src/openai-compatible/openai-compatible-engine.ts:2`.
 */
export function inclusiveShares(profile: CpuProfile, patterns: RegExp[]): { pattern: string; share: number; ms: number }[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const label = (n: ProfileNode) => `${n.callFrame.functionName || '(anonymous)'} ${shortUrl(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
  const hits = patterns.map(() => 0);
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]);
    const us = Math.max(0, profile.timeDeltas[i] ?? 0);
    if (!node || node.callFrame.functionName === '(idle)') continue;
    total += us;
    const stack: string[] = [];
    for (let cur: number | undefined = node.id; cur !== undefined; cur = parent.get(cur)) {
      const n = byId.get(cur);
      if (n) stack.push(label(n));
    }
    patterns.forEach((re, k) => {
      if (stack.some((f) => re.test(f))) hits[k] += us;
    });
  }
  return patterns.map((re, k) => ({ pattern: re.source, share: total > 0 ? hits[k] / total : 0, ms: hits[k] / 1000 }));
}

if (process.argv[1] && /cpuprofile-summary\.[cm]?[jt]s$/.test(process.argv[1])) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: cpuprofile-summary.ts <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  // `--match <regex>` (repeatable): inclusive shares of those frames instead of the summary.
  const patterns = process.argv.flatMap((a, i) => (a === '--match' && process.argv[i + 1] ? [new RegExp(process.argv[i + 1])] : []));
  if (patterns.length > 0) {
    for (const r of inclusiveShares(profile, patterns)) process.stdout.write(`${(r.share * 100).toFixed(1).padStart(5)}%  ${r.ms.toFixed(0).padStart(6)} ms  ${r.pattern}\n`);
  } else {
    process.stdout.write(formatProfileSummary(file, summarizeProfile(profile, Number(process.argv[3] ?? 25))));
  }
}
