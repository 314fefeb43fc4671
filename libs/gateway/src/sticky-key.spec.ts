/** The canary's sticky key: the end user (OpenAI's `user`) when given, else the request id; the use case reaches the router too. */
import { createRecordingSettlements } from '@weir/testing';
import type { AdmissionService, RouterService, SchedulerService } from '@weir/core';
import { createGenerationPipeline } from './pipeline';

function pipelineWith(router: RouterService) {
  const never = () => {
    throw new Error('not reached');
  };
  return createGenerationPipeline({
    router,
    admission: { reserve: never, settle: never, release: never } as unknown as AdmissionService,
    scheduler: { acquire: never } as unknown as SchedulerService,
    relay: { start: never },
    countInputTokens: never,
    settlements: createRecordingSettlements(),
    tenants: new Map(),
    clock: { now: () => 0 },
  });
}

describe('the sticky key the pipeline routes with', () => {
  const calls: Array<[string, string | undefined]> = [];
  const router: RouterService = {
    resolve: async (_caller, _alias, stickyKey, useCase) => {
      calls.push([stickyKey, useCase]);
      return { ok: false, reason: 'model_not_found', message: 'no such model' };
    },
    listAliases: async () => [],
  };
  const params = { caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' }, route: 'chat.completions' as const, alias: 'chat', generationId: 'gen_1', input: { kind: 'text' as const, text: 'hi' }, sampling: {}, arrivedAt: 0 };

  it('is the end user when the request names one, else the request id, with the use case', async () => {
    const pipeline = pipelineWith(router);
    await expect(pipeline.admit({ ...params, requestId: 'req-1', endUser: 'user-42', useCase: 'support.triage' })).rejects.toMatchObject({ code: 'model_not_found' });
    await expect(pipeline.admit({ ...params, requestId: 'req-2' })).rejects.toMatchObject({ code: 'model_not_found' });
    expect(calls).toEqual([
      ['user-42', 'support.triage'],
      ['req-2', undefined],
    ]);
  });
});
