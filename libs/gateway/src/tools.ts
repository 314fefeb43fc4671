/**
 * Tools on `POST /v1/chat/completions` (issue 6) and `POST /v1/responses`: the checks zod cannot make on its own
 * (unique tool names, a `tool_choice` naming one of the tools) and the capability check that
 * refuses tools for a model whose revisions cannot call them, before anything is held.
 */
import { type Caller, type RevisionSpec, type RouteResult, type RouterService, type ToolChoice, type ToolDefinition, WeirError, capabilitiesOf } from '@weir/core';

/** What a chat request asks of tools, as the engine request carries it. */
export interface ChatTools {
  tools: ToolDefinition[];
  toolChoice?: ToolChoice;
  parallelToolCalls?: boolean;
}

/** The tool fields of a parsed `/v1/chat/completions` body. */
export interface ChatToolFields {
  tools?: ToolDefinition[] | null;
  tool_choice?: ToolChoice | null;
  parallel_tool_calls?: boolean | null;
}

/**
 * The request's tools, or undefined when it has none (absent, null or an empty array; then
 * `tool_choice: "none" | "auto"` and `parallel_tool_calls` mean nothing and are dropped).
 * @throws WeirError `invalid_request` with `param` `tools[i].function.name` for a name used
 *   twice, and `tool_choice` for a choice naming no tool, or `"required"`/a named function
 *   without tools. `nameParam(i)` names tool `i`'s name field (Responses' flat tools: `tools[i].name`).
 */
export function chatToolsOf(body: ChatToolFields, nameParam: (i: number) => string = (i) => `tools[${i}].function.name`): ChatTools | undefined {
  const tools = body.tools ?? [];
  const choice = body.tool_choice ?? undefined;
  if (tools.length === 0) {
    if (choice === 'required' || typeof choice === 'object') {
      throw new WeirError('invalid_request', 'Invalid request: `tool_choice` asks for a tool call but the request has no `tools`; send `tools`, or remove `tool_choice`.', { param: 'tool_choice' });
    }
    return undefined;
  }
  const seen = new Set<string>();
  for (const [i, t] of tools.entries()) {
    if (seen.has(t.function.name)) {
      throw new WeirError('invalid_request', `Invalid request: \`${nameParam(i)}\`: the tool name '${t.function.name}' is used twice; tool names must be unique.`, { param: nameParam(i) });
    }
    seen.add(t.function.name);
  }
  if (typeof choice === 'object' && !seen.has(choice.function.name)) {
    throw new WeirError('invalid_request', `Invalid request: \`tool_choice\` names the function '${choice.function.name}', which is not one of \`tools\` (${[...seen].map((n) => `'${n}'`).join(', ')}).`, { param: 'tool_choice' });
  }
  return {
    tools,
    ...(choice !== undefined ? { toolChoice: choice } : {}),
    ...(body.parallel_tool_calls !== undefined && body.parallel_tool_calls !== null ? { parallelToolCalls: body.parallel_tool_calls } : {}),
  };
}

/** The route a request resolves to (revision and fallback chain). */
export type ResolvedRoute = Extract<RouteResult, { ok: true }>['route'];

/** A capability check on a resolved route: throws a WeirError `invalid_request` naming the revision that cannot serve the request. */
export type RouteCheck = (route: ResolvedRoute, alias: string) => void;

/**
 * A `beforeAdmit` hook (see the gateway's `begin`) that resolves the request's route once and
 * runs `checks` on it, refusing before any claim or reservation a request some revision of the
 * route (its choice or a fallback) cannot serve. An unknown alias passes: admission answers it
 * with the route's own field names.
 */
export function refuseIncapableRoutes(router: RouterService, caller: Caller, alias: string, checks: readonly RouteCheck[]): (stickyKey: string, useCase: string | undefined) => Promise<void> {
  return async (stickyKey, useCase) => {
    const routed = await router.resolve(caller, alias, stickyKey, useCase);
    if (!routed.ok) return;
    for (const check of checks) check(routed.route, alias);
  };
}

/**
 * Refuses a request with tools whose routed revision, or a revision of its fallback chain, does
 * not declare `capabilities.tools`.
 * @throws WeirError `invalid_request` with `param: tools`, naming the revision.
 */
export const toolsCheck: RouteCheck = ({ revision, fallbacks }, alias) => {
  for (const r of [revision, ...fallbacks]) {
    if (canCallTools(r)) continue;
    const which = r === revision ? `revision ${r.id}` : `its fallback revision ${r.id}`;
    throw new WeirError(
      'invalid_request',
      `Model '${alias}' cannot call tools: ${which} (engine ${r.engine.kind}) does not declare \`capabilities.tools\`. Remove \`tools\`, or use a model whose revisions support tool calls.`,
      { param: 'tools' },
    );
  }
};

/** Whether a revision may be sent tools. */
export function canCallTools(r: Pick<RevisionSpec, 'engine' | 'capabilities'>): boolean {
  return capabilitiesOf(r).tools;
}
