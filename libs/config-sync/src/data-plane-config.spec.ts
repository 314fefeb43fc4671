import { parseConfig } from '@weir/config';
import type { PlatformConfig } from '@weir/core';
import { configStateOf, warnChangesNeedingRestart, type DataPlaneConfig } from './data-plane-config';
import { recordingLogger } from './test-support';

const yaml = (maxConcurrent: number, price = 1) => `
revisions:
  - { id: m@1, model: m, engine: { kind: simulated }, context_window: 512, max_output_tokens: 64, default_output_tokens: 16, pricing: { input_per_mtok: ${price}, output_per_mtok: 1 } }
aliases:
  - { name: m, revision: m@1 }
tenants:
  - { id: t, name: T, apps: [{ id: a, name: A }], limits: { max_concurrent: ${maxConcurrent} } }
`;

describe('warnChangesNeedingRestart', () => {
  it('warns with the sections that differ from the starting configuration, and says nothing for an equal one', () => {
    let listener: ((c: PlatformConfig, v?: number) => void) | undefined;
    const source = { initial: parseConfig(yaml(4), 'start'), onChange: (l: (c: PlatformConfig, v?: number) => void) => (listener = l) } as unknown as DataPlaneConfig;
    const logger = recordingLogger();
    warnChangesNeedingRestart(source, logger);
    listener?.(parseConfig(yaml(4), 'same'), 2);
    expect(logger.lines).toEqual([]);
    listener?.(parseConfig(yaml(8, 2), 'changed'), 3);
    expect(logger.lines).toEqual([
      expect.objectContaining({ level: 'warn', fields: { version: 3, sections: ['tenants (limits, budgets, apps, weights, pools, deadlines)', 'revisions (engines, replicas, prices)'] } }),
    ]);
  });
});

describe('configStateOf', () => {
  it('maps a subscriber status, naming the latest rejection without payload', () => {
    expect(configStateOf({ version: 3, ageMs: 1200, stale: false, maxStalenessMs: 5000 })).toEqual({ ageMs: 1200, stale: false, maxAgeMs: 5000, version: 3 });
    expect(
      configStateOf({ version: undefined, ageMs: undefined, stale: true, maxStalenessMs: 5000, lastRejection: { reason: 'unknown_key', detail: 'key id ab12', source: 'snapshot', atMs: 1 } }),
    ).toEqual({ ageMs: 0, stale: true, maxAgeMs: 5000, reason: 'last rejected message: unknown_key (key id ab12)' });
  });
});
