/**
 * Where the all-in-one allocates per request (issue 13 item 7: "shrink the per-request object
 * graph"): starts the all-in-one as `npm start` runs it (compiled bundle, PGlite) with the speed
 * probe's configuration and the inspector on, warms it up for 3 s with 16 concurrent clients, then
 * samples every allocation (V8's sampling heap profiler, one sample per 1 KiB, objects the GC
 * collected included) during 4 s of the same load, and prints the bytes allocated per request by
 * allocation site, largest first. Not a timed test: a diagnostic.
 *
 *   node --import tsx tools/bench/alloc-profile.ts [stream]   # writes the raw profile to $TMPDIR/alloc-profile.heapprofile
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { Agent, request } from 'undici';
import { freePort, REPO_ROOT } from '@weir/launcher';
import { startAllInOneProcess, PROBE_KEY } from './all-in-one-process';
import { connectInspector } from './inspector';
void (async () => {
  const stream = process.argv[2] === 'stream';
  const mockPort = await freePort();
  const mock = spawn(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'tools/bench/mock-upstream.ts'), '--port', String(mockPort), '--tokens', '50'], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 1500));
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'alloc-'));
  const p = await startAllInOneProcess({ runner: 'bundle', dataDir, mockUrl: `http://127.0.0.1:${mockPort}`, inspect: true });
  const agent = new Agent({ connections: 16 });
  const body = JSON.stringify({ model: 'mock', messages: [{ role: 'user', content: 'Say something about the weather in a few words.' }], max_tokens: 50, stream });
  let count = 0;
  const load = async (ms: number) => {
    const until = Date.now() + ms;
    await Promise.all(Array.from({ length: 16 }, async () => {
      while (Date.now() < until) {
        const r = await request(p.url + '/v1/chat/completions', { method: 'POST', dispatcher: agent, headers: { authorization: 'Bearer ' + PROBE_KEY, 'content-type': 'application/json' }, body });
        await r.body.text();
        if (r.statusCode !== 200) throw new Error('status ' + r.statusCode);
        count++;
      }
    }));
  };
  await load(3000);
  const s = await connectInspector(p.inspectorUrl!);
  await s.call('HeapProfiler.enable');
  await s.call('HeapProfiler.startSampling', { samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  count = 0;
  await load(4000);
  const prof = (await s.call('HeapProfiler.stopSampling')) as { profile: { head: Node } };
  type Node = { callFrame: { functionName: string; url: string; lineNumber: number }; selfSize: number; children: Node[] };
  const bySite = new Map<string, number>();
  let total = 0;
  const walk = (n: Node, stack: string[]) => {
    const name = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*\//, '')}:${n.callFrame.lineNumber + 1}`;
    if (n.selfSize > 0) {
      bySite.set(name, (bySite.get(name) ?? 0) + n.selfSize);
      total += n.selfSize;
    }
    for (const c of n.children) walk(c, [...stack, name]);
  };
  walk(prof.profile.head, []);
  writeFileSync(path.join(os.tmpdir(), 'alloc-profile.heapprofile'), JSON.stringify(prof.profile));
  console.log(`requests ${count}; sampled bytes/request ${(total / count).toFixed(0)}`);
  for (const [k, v] of [...bySite.entries()].sort((a, b) => b[1] - a[1]).slice(0, 45)) console.log(`${(v / count).toFixed(0).padStart(7)} B/req  ${k}`);
  s.close();
  await p.stop();
  mock.kill();
})();
