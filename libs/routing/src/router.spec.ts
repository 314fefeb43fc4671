import { DEFAULT_ADMISSION, type PlatformConfig, type RevisionSpec } from '@weir/core';
import { createRouter, createStaticRouter } from './router';

const revision = (id: string): RevisionSpec => ({
  id,
  model: 'm',
  engine: { kind: 'openai-compatible', baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'm', api: 'chat', firstTokenTimeoutMs: 1000, idleTimeoutMs: 1000, maxConcurrency: 4 },
  contextWindow: 512,
  maxOutputTokens: 256,
  defaultOutputTokens: 64,
  pricing: { inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 1 },
});

const config: PlatformConfig = {
  revisions: [revision('m@1'), revision('m@2')],
  aliases: [
    { name: 'chat', targets: [{ revision: 'm@1', weight: 80 }, { revision: 'm@2', weight: 20 }] },
    { name: 'private', targets: [{ revision: 'm@2', weight: 1 }] },
  ],
  tenants: [
    { id: 'a', name: 'A', apps: [], allowedAliases: ['*'], defaultDeadlineMs: 120_000, limits: { maxConcurrent: 4 } },
    { id: 'b', name: 'B', apps: [], allowedAliases: ['chat'], defaultDeadlineMs: 120_000, limits: { maxConcurrent: 4 } },
  ],
  defaults: { cancelGraceMs: 250, maxBodyBytes: 1 << 20, sseHeartbeatMs: 15_000, maxQueuePerReplica: 8, admission: { ...DEFAULT_ADMISSION } },
};
const callerA = { tenantId: 'a', appId: 'x', apiKeyId: 'k' };
const callerB = { tenantId: 'b', appId: 'y', apiKeyId: 'k2' };

describe('createStaticRouter', () => {
  const router = createStaticRouter(config);

  it('resolves an alias to one of its revisions, stickily', async () => {
    const first = await router.resolve(callerA, 'chat', 'req-1');
    expect(first.ok).toBe(true);
    for (let i = 0; i < 20; i++) expect(await router.resolve(callerA, 'chat', 'req-1')).toEqual(first);
  });

  it('uses both arms of a canary', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const r = await router.resolve(callerA, 'chat', `id-${i}`);
      if (r.ok) seen.add(r.route.revision.id);
    }
    expect([...seen].sort()).toEqual(['m@1', 'm@2']);
  });

  it('answers model_not_found for unknown aliases and for aliases the tenant may not use, alike', async () => {
    const unknown = await router.resolve(callerA, 'nope', 'r');
    const forbidden = await router.resolve(callerB, 'private', 'r');
    expect(unknown).toMatchObject({ ok: false, reason: 'model_not_found' });
    expect(forbidden).toMatchObject({ ok: false, reason: 'model_not_found' });
  });

  it('lists only the aliases a tenant may use', async () => {
    expect((await router.listAliases(callerA)).map((a) => a.name)).toEqual(['chat', 'private']);
    expect((await router.listAliases(callerB)).map((a) => a.name)).toEqual(['chat']);
    expect(await router.listAliases({ ...callerA, tenantId: 'ghost' })).toEqual([]);
  });
});

describe('createRouter: pins, fallback chains and live updates', () => {
  const withRouting: PlatformConfig = {
    ...config,
    revisions: [revision('m@1'), revision('m@2'), revision('m@3')],
    aliases: [{ name: 'chat', targets: [{ revision: 'm@1', weight: 50 }, { revision: 'm@2', weight: 50 }], fallbacks: ['m@3', 'm@1'] }],
    tenants: [
      { ...config.tenants[0], routes: [{ alias: 'chat', pin: 'm@2' }, { alias: 'chat', useCase: 'triage', pin: 'm@3', fallbacks: ['m@1'] }] },
      { ...config.tenants[1], allowedAliases: ['chat'] },
    ],
  };
  const ids = (r: Awaited<ReturnType<ReturnType<typeof createRouter>['resolve']>>) => (r.ok ? [r.route.revision.id, r.route.fallbacks.map((f) => f.id)] : r.reason);

  it("follows a tenant's pin, and its use-case route before it", async () => {
    const router = createRouter(withRouting);
    for (let i = 0; i < 50; i++) expect(ids(await router.resolve(callerA, 'chat', `id-${i}`))).toEqual(['m@2', ['m@3', 'm@1']]);
    expect(ids(await router.resolve(callerA, 'chat', 'id-0', 'triage'))).toEqual(['m@3', ['m@1']]);
    // A use case with no route of its own takes the alias route.
    expect(ids(await router.resolve(callerA, 'chat', 'id-0', 'other'))).toEqual(['m@2', ['m@3', 'm@1']]);
  });

  it("gives the alias's fallback chain without the revision chosen", async () => {
    const router = createRouter(withRouting);
    const seen = new Map<string, string[]>();
    for (let i = 0; i < 200; i++) {
      const r = await router.resolve(callerB, 'chat', `id-${i}`);
      if (r.ok) seen.set(r.route.revision.id, r.route.fallbacks.map((f) => f.id));
    }
    expect(Object.fromEntries(seen)).toEqual({ 'm@1': ['m@3'], 'm@2': ['m@3', 'm@1'] });
  });

  it('applies a weight change or a rollback to the next request, atomically', async () => {
    const router = createRouter(withRouting);
    const split = (weights: [number, number]): PlatformConfig => ({
      ...withRouting,
      aliases: [{ name: 'chat', targets: [{ revision: 'm@1', weight: weights[0] }, { revision: 'm@2', weight: weights[1] }] }],
    });
    const arms = async () => {
      const counts: Record<string, number> = {};
      for (let i = 0; i < 1_000; i++) {
        const r = await router.resolve(callerB, 'chat', `req-${i}`);
        if (r.ok) counts[r.route.revision.id] = (counts[r.route.revision.id] ?? 0) + 1;
      }
      return counts;
    };
    router.update(split([0, 100]));
    expect(await arms()).toEqual({ 'm@2': 1_000 });
    // Roll back to the previous revision: every request at once, none in between.
    router.update(split([100, 0]));
    expect(await arms()).toEqual({ 'm@1': 1_000 });
    // A canary at 10 %: within ±3 points over 1,000 ids.
    router.update(split([90, 10]));
    expect(Math.abs(((await arms())['m@2'] ?? 0) / 10 - 10)).toBeLessThanOrEqual(3);
  });

  it('stops routing to a revision the new configuration no longer lists', async () => {
    const router = createRouter(withRouting);
    router.update({ ...withRouting, revisions: [revision('m@1'), revision('m@2')], tenants: [withRouting.tenants[1]] });
    for (let i = 0; i < 50; i++) {
      const r = await router.resolve(callerB, 'chat', `id-${i}`);
      expect(r.ok && r.route.fallbacks.map((f) => f.id).includes('m@3')).toBe(false);
    }
  });
});

describe('a canary arm falls back to the stable arm', () => {
  const withTools = (r: RevisionSpec): RevisionSpec => ({ ...r, capabilities: { streaming: true, tools: true, jsonOutput: false } });
  const cfg: PlatformConfig = {
    ...config,
    revisions: [revision('m@1'), revision('m@2'), withTools(revision('m@3'))],
    aliases: [
      { name: 'chat', targets: [{ revision: 'm@1', weight: 80 }, { revision: 'm@2', weight: 20 }] },
      { name: 'tooling', targets: [{ revision: 'm@1', weight: 80 }, { revision: 'm@3', weight: 20 }] },
    ],
    tenants: [
      ...config.tenants,
      { id: 'p', name: 'P', apps: [], allowedAliases: ['*'], defaultDeadlineMs: 120_000, limits: { maxConcurrent: 4 }, routes: [{ alias: 'chat', pin: 'm@2' }] },
    ],
  };
  const router = createRouter(cfg);
  const keyFor = async (alias: string, revisionId: string, tenant = callerA) => {
    for (let i = 0; i < 500; i++) {
      const r = await router.resolve(tenant, alias, `k${i}`);
      if (r.ok && r.route.revision.id === revisionId) return r.route;
    }
    throw new Error(`no key lands on ${revisionId}`);
  };

  it('adds the stable arm last to a canary request, not to a stable one', async () => {
    expect((await keyFor('chat', 'm@2')).fallbacks.map((r) => r.id)).toEqual(['m@1']);
    expect((await keyFor('chat', 'm@1')).fallbacks).toEqual([]);
  });

  it('not when the stable arm lacks a capability the canary has, nor for a pin', async () => {
    expect((await keyFor('tooling', 'm@3')).fallbacks).toEqual([]);
    const pinned = await router.resolve({ tenantId: 'p', appId: 'x', apiKeyId: 'k3' }, 'chat', 'any');
    expect(pinned.ok && pinned.route.revision.id).toBe('m@2');
    expect(pinned.ok && pinned.route.fallbacks).toEqual([]);
  });
});

describe('a use case’s chain', () => {
  const withUseCases: PlatformConfig = {
    ...config,
    tenants: [
      {
        ...config.tenants[0],
        routes: [{ alias: 'chat', useCase: 'other', pin: 'm@1' }],
        useCases: [
          { name: 'pinned', model: 'chat', pin: 'm@2', fallbacks: ['m@1'], limits: {} },
          { name: 'auto', model: 'chat', fallbacks: ['m@2'], limits: {} },
        ],
      },
      config.tenants[1],
    ],
  };
  const router = createStaticRouter(withUseCases);

  it('pins every request of a pinned use case, with its fallbacks; a use case following the alias gets the canary split and its own chain', async () => {
    for (let i = 0; i < 20; i++) {
      const r = await router.resolve(callerA, 'chat', `req-${i}`, 'pinned');
      expect(r.ok && [r.route.revision.id, r.route.fallbacks.map((f) => f.id)]).toEqual(['m@2', ['m@1']]);
    }
    const arms = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const r = await router.resolve(callerA, 'chat', `req-${i}`, 'auto');
      if (!r.ok) throw new Error(r.message);
      arms.add(r.route.revision.id);
      if (r.route.revision.id === 'm@1') expect(r.route.fallbacks.map((f) => f.id)).toEqual(['m@2']);
    }
    expect(arms).toEqual(new Set(['m@1', 'm@2']));
  });

  it('applies only to its own model, and leaves other use cases and requests without one to the routes and the alias', async () => {
    const other = await router.resolve(callerA, 'chat', 'req-1', 'other');
    expect(other.ok && other.route.revision.id).toBe('m@1');
    const viaPrivate = await router.resolve(callerA, 'private', 'req-1', 'pinned');
    expect(viaPrivate.ok && [viaPrivate.route.revision.id, viaPrivate.route.fallbacks]).toEqual(['m@2', []]);
  });
});
