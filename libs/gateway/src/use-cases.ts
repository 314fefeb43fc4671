/**
 * Requests routed by their use case (issue 16 item 7; docs/api.md "Use cases"): a request that
 * names a use case its tenant's policy defines (body `use_case`, else `x-weir-use-case`) may omit
 * `model`, and is then routed by that use case's chain (its `model` alias; the router applies its
 * pin and fallbacks). A request naming a model is routed by it, as before.
 */
import { type UseCasePolicy, WeirError } from '@weir/core';

const SESSION_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The request's session or agent-run id: the `x-weir-session-id` header, or undefined. Its caps
 * apply only when the caller's app allows sessions (admission's `withSessionBudgets`).
 * @throws WeirError `invalid_request` (`param: x-weir-session-id`) for a value that is not 1–128
 *   characters of `[A-Za-z0-9._:-]`.
 */
export function sessionIdOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  if (!SESSION_ID.test(header)) throw new WeirError('invalid_request', '`x-weir-session-id` must be 1-128 letters, digits and . _ : - (for example run-2026-12-07.42).', { param: 'x-weir-session-id' });
  return header;
}

/** Most use-case names quoted in a refusal. */
const LISTED = 10;

/**
 * The alias a request is routed by: `model` when given, else the model of the use case
 * `useCase` among the caller's tenant's `useCases`.
 * @param useCases the tenant's use cases (`GenerationPipeline.useCases`).
 * @param params the request's field names (`model`, `use_case`) as its wire spells them.
 * @throws WeirError `invalid_request` (400): no model and no use case (`param` the model field);
 *   no model and a use case the tenant's policy does not define (`param` the use-case field),
 *   listing the use cases it does define.
 */
export function modelOrUseCase(
  model: string | undefined,
  useCase: string | undefined,
  useCases: readonly UseCasePolicy[],
  params: { model: string; useCase: string },
): string {
  if (model !== undefined) return model;
  if (useCase === undefined) {
    throw new WeirError(
      'invalid_request',
      `Invalid request: \`${params.model}\` is required: name the model alias to use (GET /v1/models lists yours), or send \`${params.useCase}\` naming a use case your tenant's policy defines (its model chain is used).`,
      { param: params.model },
    );
  }
  const policy = useCases.find((u) => u.name === useCase);
  if (policy) return policy.model;
  const names = useCases.map((u) => u.name);
  const known = names.length === 0 ? 'it defines none' : `it defines ${names.slice(0, LISTED).map((n) => `'${n}'`).join(', ')}${names.length > LISTED ? ', …' : ''}`;
  throw new WeirError(
    'invalid_request',
    `Use case '${useCase}' is not defined in your tenant's policy (${known}), so it has no model chain: send \`${params.model}\` to choose the model yourself, or ask your platform team to define the use case (weir use-cases set).`,
    { param: params.useCase },
  );
}
