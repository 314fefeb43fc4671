import type { TenantSpec } from '@weir/core';
import { tenantKeyOf } from '@weir/core';
import { withTenantUids } from './tenant-uids';

const tenant = (id: string, uid?: string): TenantSpec => ({ id, name: id, apps: [], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 8 }, ...(uid ? { uid } : {}) });
const keyOf = (t: TenantSpec) => tenantKeyOf({ tenantId: t.id, ...(t.uid !== undefined ? { tenantUid: t.uid } : {}) });

describe('withTenantUids', () => {
  it('gives a file tenant the uid of its row, so its key is the one its callers carry', () => {
    const uids = new Map([['demo', 'demo~00000000000000a1']]);
    const [t] = withTenantUids([tenant('demo')], uids);
    expect(t.uid).toBe('demo~00000000000000a1');
    expect(keyOf(t)).toBe(tenantKeyOf({ tenantId: 'demo', tenantUid: 'demo~00000000000000a1' }));
  });

  it('keeps a uid the snapshot carries, and a tenant without a row, unchanged', () => {
    const uids = new Map([
      ['a', 'a~00000000000000a1'],
      ['b', 'b~00000000000000b1'],
    ]);
    const out = withTenantUids([tenant('a', 'a~00000000000000ff'), tenant('b'), tenant('c')], uids);
    expect(out.map((t) => t.uid)).toEqual(['a~00000000000000ff', 'b~00000000000000b1', undefined]);
  });

  it('returns the same array when there is nothing to fill in', () => {
    const tenants = [tenant('a', 'a~00000000000000a1'), tenant('z')];
    expect(withTenantUids(tenants, new Map([['a', 'a~00000000000000a2']]))).toBe(tenants);
  });
});
