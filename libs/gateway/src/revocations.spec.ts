import { createRevocations, type RevokedTarget } from './revocations';

describe('Revocations.apply (the fast-path messages)', () => {
  it('maps each message kind onto the state, telling listeners of each new refusal once', () => {
    const invalidated: string[] = [];
    const r = createRevocations({ keyCache: { invalidate: (h) => invalidated.push(`sha:${h}`), invalidateKeyId: (id) => invalidated.push(`id:${id}`) } });
    const told: RevokedTarget[] = [];
    r.onRevoked((t) => told.push(t));

    r.apply({ kind: 'api_key', api_key_id: 'key_1', api_key_sha256: 'AB'.repeat(32) });
    expect(r.isKeyRevoked({ keyId: 'key_1' })).toBe(true);
    expect(r.isKeyRevoked({ sha256: 'ab'.repeat(32) })).toBe(true);
    expect(invalidated).toEqual(['id:key_1', `sha:${'ab'.repeat(32)}`]);

    r.apply({ kind: 'tenant', tenant_id: 't' });
    expect(r.tenantRefusal('t')?.code).toBe('tenant_disabled');
    r.apply({ kind: 'tenant', tenant_id: 't', enabled: false });
    expect(r.tenantRefusal('t')).toBeUndefined();

    r.apply({ kind: 'kill_switch', tenant_id: 'u', enabled: true });
    r.apply({ kind: 'kill_switch', tenant_id: 'u', enabled: true });
    expect(r.tenantRefusal('u')?.code).toBe('kill_switch');
    r.apply({ kind: 'kill_switch', tenant_id: 'u', enabled: false });
    expect(r.tenantRefusal('u')).toBeUndefined();

    // Incomplete messages change nothing.
    r.apply({ kind: 'api_key' });
    r.apply({ kind: 'kill_switch', enabled: true });

    expect(told).toEqual([
      { keyId: 'key_1', reason: 'api_key_revoked' },
      { tenantId: 't', reason: 'tenant_disabled' },
      { tenantId: 'u', reason: 'kill_switch' },
    ]);
  });
});
