import type { GenerationInput } from '@weir/core';

/**
 * Renders a generation input as the plain text a completion model continues.
 *
 * - `text` input is used as is.
 * - `chat` input (for models without a chat template, such as stories260K): the contents of
 *   the `system` and `developer` messages first, then every other message in order, joined
 *   with a single `\n`. Roles and names are not written out: a tiny completion model does
 *   worse with `User:`/`Assistant:` markers or a Llama-2 wrapper (STACK.md). Chat templates
 *   are not applied yet, even when a model has one.
 */
export function renderPlainPrompt(input: GenerationInput): string {
  if (input.kind === 'text') return input.text;
  // Never asked of an embedding input (the engine embeds each item); its items, one per line.
  if (input.kind === 'embedding') return input.items.filter((i): i is string => typeof i === 'string').join('\n');
  const first = input.messages.filter((m) => m.role === 'system' || m.role === 'developer');
  const rest = input.messages.filter((m) => m.role !== 'system' && m.role !== 'developer');
  return [...first, ...rest].map((m) => m.content).join('\n');
}
