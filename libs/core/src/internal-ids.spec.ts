import { appKeyOf, retiredInternalIds, slugOfInternalId, tenantKeyOf } from './internal-ids';
import type { TenantSpec } from './platform-config';

const tenant = (id: string, uid: string | undefined, apps: { id: string; uid?: string }[] = []): TenantSpec => ({
  id,
  name: id,
  ...(uid !== undefined ? { uid } : {}),
  apps: apps.map((a) => ({ ...a, name: a.id, limits: {} })),
  allowedAliases: ['*'],
  defaultDeadlineMs: 1_000,
  limits: { maxConcurrent: 1 },
});

describe('internal ids (issue 14 §4)', () => {
  it('files state under the internal id, else the slug', () => {
    expect(tenantKeyOf({ tenantId: 'acme', tenantUid: 'acme~00000000000000aa' })).toBe('acme~00000000000000aa');
    expect(tenantKeyOf({ tenantId: 'acme' })).toBe('acme');
    expect(appKeyOf({ appId: 'web', appUid: 'web~00000000000000bb' })).toBe('web~00000000000000bb');
    expect(appKeyOf({ appId: 'web' })).toBe('web');
  });

  it.each([
    ['acme~00000000000000aa', 'acme'],
    ['acme', 'acme'],
    ['team/a.b@c~0123456789abcdef', 'team/a.b@c'],
  ])('knows the slug %s was made for', (uid, slug) => {
    expect(slugOfInternalId(uid)).toBe(slug);
  });

  it('retires the internal ids a change removes: a deleted tenant, one created again, a deleted app', () => {
    const before = [
      tenant('acme', 'acme~00000000000000a1', [{ id: 'web', uid: 'web~00000000000000b1' }, { id: 'batch', uid: 'batch~00000000000000b2' }]),
      tenant('gone', 'gone~00000000000000a2', [{ id: 'g', uid: 'g~00000000000000b3' }]),
      tenant('legacy', 'legacy'),
      tenant('file', undefined, [{ id: 'f' }]),
    ];
    const after = [
      tenant('acme', 'acme~00000000000000a1', [{ id: 'web', uid: 'web~00000000000000b1' }]),
      tenant('gone', 'gone~00000000000000ff', [{ id: 'g', uid: 'g~00000000000000fe' }]),
      tenant('legacy', 'legacy'),
    ];
    expect(retiredInternalIds(before, after)).toEqual(new Set(['batch~00000000000000b2', 'g~00000000000000b3', 'gone~00000000000000a2']));
    expect(retiredInternalIds(after, after).size).toBe(0);
  });
});
