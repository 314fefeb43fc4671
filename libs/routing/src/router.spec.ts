import { DEFAULT_ADMISSION, type PlatformConfig, type RevisionSpec } from '@weir/core';
import { createStaticRouter } from './router';

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
