import type { TenantCachePolicy, TenantSpec } from '@weir/core';
import { cacheDropsOf } from './policy-changes';

const policy: TenantCachePolicy = { exact: { enabled: true, ttlMs: 1_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 };
const tenant = (id: string, cache?: TenantCachePolicy, uid?: string): TenantSpec => ({ id, name: id, apps: [], allowedAliases: ['*'], defaultDeadlineMs: 1, limits: { maxConcurrent: 1 }, ...(cache ? { cache } : {}), ...(uid ? { uid } : {}) });

describe('cacheDropsOf', () => {
  it('names tenants whose cache was turned off or who were deleted, by internal id', () => {
    const before = [tenant('a', policy, 'a~1'), tenant('b', policy), tenant('c', policy), tenant('d')];
    const after = [tenant('a', undefined, 'a~1'), tenant('c', { ...policy, exact: { enabled: true, ttlMs: 5 } }), tenant('d', policy)];
    expect(cacheDropsOf(before, after)).toEqual(['a~1', 'b']);
  });

  it('a tenant re-created under the same slug is a different internal id: the old one is dropped', () => {
    expect(cacheDropsOf([tenant('a', policy, 'a~1')], [tenant('a', policy, 'a~2')])).toEqual(['a~1']);
  });
});
