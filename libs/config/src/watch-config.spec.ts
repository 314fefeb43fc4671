import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { PlatformConfig } from '@weir/core';
import { loadConfigFile } from './parse-config';
import { nonRoutingChanges, watchConfigFile } from './watch-config';

const yaml = (weights: [number, number], price = 1) => `
revisions:
  - { id: m@1, model: m, engine: { kind: simulated }, context_window: 4096, max_output_tokens: 256, default_output_tokens: 16, pricing: { input_per_mtok: ${price}, output_per_mtok: 2 } }
  - { id: m@2, model: m, engine: { kind: simulated }, context_window: 4096, max_output_tokens: 256, default_output_tokens: 16, pricing: { input_per_mtok: 1, output_per_mtok: 2 } }
aliases:
  - name: chat
    targets: [{ revision: m@1, weight: ${weights[0]} }, { revision: m@2, weight: ${weights[1]} }]
`;

/** Resolves with the next event of the watcher, or rejects after `ms`. */
function nextEvent(events: Array<{ kind: 'update' | 'rejected'; value: unknown }>, ms = 5_000): Promise<{ kind: 'update' | 'rejected'; value: unknown }> {
  const start = Date.now();
  const seen = events.length;
  return new Promise((resolve, reject) => {
    const tick = setInterval(() => {
      if (events.length > seen) {
        clearInterval(tick);
        resolve(events[seen]);
      } else if (Date.now() - start > ms) {
        clearInterval(tick);
        reject(new Error('no watcher event'));
      }
    }, 10);
  });
}

describe('watchConfigFile', () => {
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'weir-watch-'));
    file = path.join(dir, 'weir.yaml');
    writeFileSync(file, yaml([100, 0]));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('hands over a valid routing change, rejects a broken file or a revision change, and follows a replaced file', async () => {
    const events: Array<{ kind: 'update' | 'rejected'; value: unknown }> = [];
    const watcher = watchConfigFile(file, {
      current: loadConfigFile(file),
      intervalMs: 25,
      onUpdate: (config) => events.push({ kind: 'update', value: config }),
      onRejected: (reason) => events.push({ kind: 'rejected', value: reason }),
    });
    try {
      // Let the first poll take its baseline (a write before it would be the baseline itself).
      await new Promise((r) => setTimeout(r, 200));
      // Sub-second mtime changes are seen; write and wait for each event in turn.
      const started = Date.now();
      let event = nextEvent(events);
      writeFileSync(file, yaml([0, 100]));
      const update = await event;
      expect(update.kind).toBe('update');
      expect((update.value as PlatformConfig).aliases[0].targets).toEqual([
        { revision: 'm@1', weight: 0 },
        { revision: 'm@2', weight: 100 },
      ]);
      expect(Date.now() - started).toBeLessThan(2_000);

      event = nextEvent(events);
      writeFileSync(file, 'aliases: [ {');
      expect(await event).toMatchObject({ kind: 'rejected', value: expect.stringContaining('weir.yaml') });

      event = nextEvent(events);
      writeFileSync(file, yaml([100, 0], 5));
      expect(await event).toMatchObject({ kind: 'rejected', value: expect.stringContaining('restart to apply') });

      // An editor's save: a new file renamed over the old one.
      event = nextEvent(events);
      writeFileSync(`${file}.tmp`, yaml([50, 50]));
      renameSync(`${file}.tmp`, file);
      const replaced = await event;
      expect(replaced.kind).toBe('update');
      expect((replaced.value as PlatformConfig).aliases[0].targets.map((t) => t.weight)).toEqual([50, 50]);
    } finally {
      watcher.stop();
    }
  });
});

describe('nonRoutingChanges', () => {
  const base = (extra = '') => `
revisions:
  - { id: m@1, model: m, engine: { kind: simulated }, context_window: 4096, max_output_tokens: 256, default_output_tokens: 16, pricing: { input_per_mtok: 1, output_per_mtok: 2 } }
aliases: [{ name: chat, revision: m@1 }]
tenants:
  - { id: acme, name: Acme, allowed_aliases: ['*'], limits: { max_concurrent: 8 ${extra} } }
`;
  const parse = (text: string) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'weir-nonrouting-'));
    try {
      writeFileSync(path.join(dir, 'w.yaml'), text);
      return loadConfigFile(path.join(dir, 'w.yaml'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };

  it('names a change to tenant limits (it applies only after a restart), and nothing for routing alone', () => {
    expect(nonRoutingChanges(parse(base()), parse(base(', requests_per_minute: 1')))).toEqual(['tenants (limits, budgets, apps, weights, pools, deadlines)']);
    expect(nonRoutingChanges(parse(base()), parse(base().replace("allowed_aliases: ['*']", 'allowed_aliases: [chat]')))).toEqual([]);
    expect(nonRoutingChanges(parse(base()), parse(`${base()}defaults: { cancel_grace_ms: 100 }\n`))).toEqual(['defaults']);
  });
});
