/**
 * Which configuration changes the all-in-one reports as applying only after a restart: not a
 * tenant created or deleted with the default scheduling (the scheduler treats an unknown tenant
 * as weight 1 in the shared pools), but a weight or dedicated pool it does not run, named.
 */
import { parseConfig } from '@weir/config';
import type { PlatformConfig } from '@weir/core';
import { restartOnlyChanges } from './platform';

const base = parseConfig(
  `revisions:
  - id: sim@1
    model: sim
    engine: { kind: simulated }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 4
    pricing: { input_per_mtok: 1, output_per_mtok: 2 }
aliases:
  - name: sim
    revision: sim@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`,
  'test',
);
const demo = base.tenants[0];
type Tenant = PlatformConfig['tenants'][number];
const withTenants = (tenants: Tenant[], extra: Partial<PlatformConfig> = {}): PlatformConfig => ({ ...base, ...extra, tenants });
const servedIds = new Set(['sim@1']);

/** The transition from `before` to `after` for a process started on `base`. */
const changes = (before: PlatformConfig, after: PlatformConfig) => restartOnlyChanges({ before, after, previousFull: before, full: after, servedIds, scheduled: base.tenants });

describe('restartOnlyChanges', () => {
  it.each<[string, PlatformConfig]>([
    ['a new tenant with the default scheduling', withTenants([demo, { ...demo, id: 'acme', name: 'Acme' }])],
    ['a new tenant with weight 1 written out', withTenants([demo, { ...demo, id: 'acme', name: 'Acme', schedulingWeight: 1 }])],
    ['a deleted tenant', withTenants([])],
    ['a renamed tenant', withTenants([{ ...demo, name: 'Demo renamed' }])],
  ])('reports nothing for %s', (_case, after) => {
    expect(changes(base, after)).toEqual([]);
  });

  it('names a tenant whose weight or dedicated pool the scheduler does not run, and says what it runs', () => {
    const after = withTenants([{ ...demo, schedulingWeight: 3 }, { ...demo, id: 'gold', name: 'Gold', dedicatedPool: 'gold' }]);
    expect(changes(base, after)).toEqual([
      "tenants' scheduling (the scheduler is built at start; until a restart they keep what it was built with): demo: weight 3 (runs 1); gold: dedicated pool gold (runs in the shared pools)",
    ]);
  });

  it('reports a scheduling change once, and nothing for a change back to what the scheduler runs', () => {
    const raised = withTenants([{ ...demo, schedulingWeight: 3 }]);
    expect(changes(base, raised)).toHaveLength(1);
    // The next snapshot (a new tenant) leaves demo as it was: not reported again.
    expect(changes(raised, withTenants([{ ...demo, schedulingWeight: 3 }, { ...demo, id: 'acme', name: 'Acme' }]))).toEqual([]);
    expect(changes(raised, base)).toEqual([]);
  });

  it('reports the defaults, and a newly listed revision this process does not serve (once)', () => {
    const sim2 = { ...base.revisions[0], id: 'sim@2' };
    const listed = withTenants(base.tenants, { revisions: [...base.revisions, sim2] });
    expect(restartOnlyChanges({ before: base, after: base, previousFull: base, full: listed, servedIds, scheduled: base.tenants })).toEqual([
      'revisions not served by this process (restart to serve them): sim@2',
    ]);
    expect(restartOnlyChanges({ before: base, after: base, previousFull: listed, full: listed, servedIds, scheduled: base.tenants })).toEqual([]);
    const defaults = withTenants(base.tenants, { defaults: { ...base.defaults, cancelGraceMs: base.defaults.cancelGraceMs + 1 } });
    expect(changes(base, defaults)).toEqual(['defaults']);
  });
});
