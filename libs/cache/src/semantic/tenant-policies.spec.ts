import { type TenantSpec, tenantKeyOf } from '@weir/core';
import { semanticEmbeddingRevisionsOf, semanticPoliciesOf } from './tenant-policies';

const tenant = (id: string, cache?: TenantSpec['cache'], uid?: string): TenantSpec => ({ id, name: id, apps: [], allowedAliases: ['*'], defaultDeadlineMs: 1_000, limits: { maxConcurrent: 1 }, ...(uid ? { uid } : {}), ...(cache ? { cache } : {}) }) as TenantSpec;
const base = { exact: { enabled: false, ttlMs: 1_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 };

describe('semanticPoliciesOf', () => {
  it('keys enabled policies by internal id and leaves out tenants without one', () => {
    const uid = 'acme~0123456789abcdef';
    const map = semanticPoliciesOf([
      tenant('acme', { ...base, semantic: { enabled: true, ttlMs: 9_000, threshold: 0.99, embeddingRevision: 'e@1' } }, uid),
      tenant('bob', { ...base, semantic: { enabled: true, ttlMs: 5_000, embeddingRevision: 'e@2' } }),
      tenant('off', { ...base, exact: { enabled: true, ttlMs: 1_000 }, semantic: { enabled: false, ttlMs: 5_000, embeddingRevision: 'e@1' } }),
      tenant('none'),
    ]);
    expect([...map.keys()].sort()).toEqual([uid, tenantKeyOf({ tenantId: 'bob' })].sort());
    expect(map.get(uid)).toEqual({ enabled: true, threshold: 0.99, ttlMs: 9_000, embeddingRevision: 'e@1' });
    expect(map.get(tenantKeyOf({ tenantId: 'bob' }))?.threshold).toBe(0.97);
    expect(map.has('acme')).toBe(false);
    expect(semanticEmbeddingRevisionsOf([tenant('bob', { ...base, semantic: { enabled: true, ttlMs: 5_000, embeddingRevision: 'e@2' } })])).toEqual(new Set(['e@2']));
  });
});
