/**
 * Per-tenant content policy (issue 15, item 5): which tenants may have prompt and output text
 * logged (`contentLogging` AND a `redactionProfile`: ARCHITECTURE.md §5), and which have prompts
 * redacted before they are sent upstream (`redactUpstream`). Profiles are compiled and redactors
 * built when a configuration snapshot is applied (`update`), never per request: a request of a
 * tenant with neither costs one map lookup, and none at all while no tenant has either.
 */
import { randomBytes } from 'node:crypto';
import type { GenerationInput, PlatformConfig, TenantSpec } from '@weir/core';
import { compileProfiles, createRedactor, type RedactionResult, type Redactor, type RedactorOptions } from '@weir/redaction';

/** What the gateway does with one tenant's content. */
export interface TenantContentPolicy {
  /** The redaction profile's name. */
  profile: string;
  /** Log the redacted prompt and output (one `content` line per request). */
  logContent: boolean;
  /** Redact the prompt before it is sent upstream. */
  redactUpstream: boolean;
  /** The redactor of log lines: capped (`maxChars`, default 16 KiB per text, the rest dropped with a marker). */
  logRedactor: Redactor;
  /** The redactor of upstream prompts (`redactChunked`): never truncates (up to the body limit), 16 KiB chunks with a turn of the event loop between. */
  upstreamRedactor: Redactor;
}

/** Content policies by tenant id (and by tenant and use case), replaced atomically by {@link ContentPolicies.update}. */
export interface ContentPolicies {
  /** True when some tenant logs content or redacts upstream (false: skip every lookup). */
  readonly active: boolean;
  /** The policy of tenant `tenantId` (the configuration's tenant id), or undefined when it has none. */
  forTenant(tenantId: string): TenantContentPolicy | undefined;
  /**
   * The policy of a request of tenant `tenantId` naming `useCase`: the use case's own when the
   * tenant defines it with a `redactionProfile` (the tenant's logging and upstream flags, the use
   * case's profile), else the tenant's ({@link forTenant}).
   */
  forRequest(tenantId: string, useCase: string | undefined): TenantContentPolicy | undefined;
  /**
   * Rebuilds the policies from a snapshot (which `parseConfig` validated: profiles compile and
   * tenants name known ones). A tenant naming a profile that does not compile gets no policy and
   * is reported through `onInvalid` (nothing of it is logged: fail closed).
   */
  update(config: Pick<PlatformConfig, 'tenants' | 'redactionProfiles'>): void;
}

/** Options of {@link createContentPolicies}. */
export interface ContentPolicyOptions {
  /**
   * Options of the log redactors (cap, budget, hash key). Default `createRedactor`'s (16 KiB, 250
   * ms) and one random hash key per `createContentPolicies` call, shared by every redactor it builds.
   */
  log?: RedactorOptions;
  /** Options of the upstream redactors. Default: `maxChars` 4 MiB (above any body limit), budget 1,000 ms per 16 KiB chunk. */
  upstream?: RedactorOptions;
  /** Told when a tenant's profile cannot be built (no policy for it). */
  onInvalid?: (tenantId: string, problems: string[]) => void;
}

const wants = (t: TenantSpec) => t.redactionProfile !== undefined && (t.contentLogging === true || t.redactUpstream === true);
/** A tenant some of whose use cases name their own profile, and that logs content or redacts upstream. */
const wantsUseCases = (t: TenantSpec) => (t.contentLogging === true || t.redactUpstream === true) && (t.useCases ?? []).some((u) => u.redactionProfile !== undefined);
/** The key of a use case's policy. */
const useCaseKey = (tenantId: string, useCase: string) => `${tenantId}\u0000${useCase}`;

/** Creates the policies of `config`'s tenants. */
export function createContentPolicies(config: Pick<PlatformConfig, 'tenants' | 'redactionProfiles'>, options: ContentPolicyOptions = {}): ContentPolicies {
  let byTenant = new Map<string, TenantContentPolicy>();
  // One hash key for the process's life (unless given): `hash` replacements of a value stay
  // the same across snapshots and between the log and upstream redactors.
  const hashKey = options.log?.hashKey ?? options.upstream?.hashKey ?? randomBytes(32);
  const logOptions: RedactorOptions = { hashKey, ...options.log };
  const upstreamOptions: RedactorOptions = { maxChars: 4 * 1024 * 1024, budgetMs: 1_000, hashKey, ...options.upstream };
  const build = (c: Pick<PlatformConfig, 'tenants' | 'redactionProfiles'>) => {
    const next = new Map<string, TenantContentPolicy>();
    const tenants = c.tenants.filter(wants);
    const withUseCases = c.tenants.filter(wantsUseCases);
    if (tenants.length === 0 && withUseCases.length === 0) return next;
    const compiled = compileProfiles((c.redactionProfiles ?? []).map((p) => ({ ...p })));
    // A bad profile leaves only the tenants naming it without a policy; the rest compile alone.
    const profiles = compiled.ok ? compiled.profiles : undefined;
    const profileOf = (owner: string, name: string) => {
      let profile = profiles?.get(name);
      if (!profile && !compiled.ok) {
        const alone = compileProfiles((c.redactionProfiles ?? []).filter((p) => p.name === name));
        profile = alone.ok ? alone.profiles.get(name) : undefined;
        if (!profile) options.onInvalid?.(owner, alone.ok ? [`unknown redaction profile '${name}'`] : alone.errors);
      } else if (!profile) options.onInvalid?.(owner, [`unknown redaction profile '${name}'`]);
      return profile;
    };
    const policyOf = (t: TenantSpec, name: string, owner: string): TenantContentPolicy | undefined => {
      const profile = profileOf(owner, name);
      if (!profile) return undefined;
      return {
        profile: name,
        logContent: t.contentLogging === true,
        redactUpstream: t.redactUpstream === true,
        logRedactor: createRedactor(profile, logOptions),
        upstreamRedactor: createRedactor(profile, upstreamOptions),
      };
    };
    for (const t of tenants) {
      const policy = policyOf(t, t.redactionProfile as string, t.id);
      if (policy) next.set(t.id, policy);
    }
    // A use case's own profile replaces the tenant's for its traffic. One that does not compile
    // (reported through onInvalid) leaves the use case on the tenant's policy: a tenant that
    // redacts upstream has a profile of its own (parse-config), so its prompts are never sent raw.
    for (const t of withUseCases) {
      for (const u of t.useCases ?? []) {
        if (u.redactionProfile === undefined) continue;
        const policy = policyOf(t, u.redactionProfile, `${t.id}/${u.name}`);
        if (policy) next.set(useCaseKey(t.id, u.name), policy);
      }
    }
    return next;
  };
  byTenant = build(config);
  return {
    get active() {
      return byTenant.size > 0;
    },
    forTenant: (tenantId) => (byTenant.size === 0 ? undefined : byTenant.get(tenantId)),
    forRequest(tenantId, useCase) {
      if (byTenant.size === 0) return undefined;
      return (useCase === undefined ? undefined : byTenant.get(useCaseKey(tenantId, useCase))) ?? byTenant.get(tenantId);
    },
    update(c) {
      byTenant = build(c);
    },
  };
}

/** Spans replaced, by type, over several redactions (for metrics). */
export type RedactionCounts = Record<string, number>;

/** The outcome of {@link redactInput}: the redacted input, or the failure (send nothing). */
export type RedactedInput = { ok: true; input: GenerationInput; counts: RedactionCounts } | { ok: false; reason: 'timeout' | 'error'; error?: unknown };

function add(into: RedactionCounts, counts: Readonly<Record<string, number>>) {
  for (const [k, v] of Object.entries(counts)) into[k] = (into[k] ?? 0) + v;
}

/**
 * Redacts a generation input with `redactor`, chunk by chunk with turns of the event loop between
 * (`Redactor.redactChunked`: a large prompt never holds other requests up): the text, or every
 * message's content and tool-call arguments (roles, names and ids are kept). Fails as a whole
 * when any part fails.
 */
export async function redactInput(redactor: Redactor, input: GenerationInput): Promise<RedactedInput> {
  const counts: RedactionCounts = {};
  const run = async (text: string): Promise<string | RedactionResult> => {
    if (text.length === 0) return text;
    const r = await redactor.redactChunked(text);
    if (!r.ok) return r;
    add(counts, r.counts);
    return r.text;
  };
  if (input.kind === 'text') {
    const t = await run(input.text);
    return typeof t === 'string' ? { ok: true, input: { kind: 'text', text: t }, counts } : failed(t);
  }
  if (input.kind === 'embedding') {
    // Text items are redacted; token-id arrays carry no text to scan and go as sent.
    const items: (string | number[])[] = [];
    for (const item of input.items) {
      if (typeof item !== 'string') {
        items.push(item);
        continue;
      }
      const t = await run(item);
      if (typeof t !== 'string') return failed(t);
      items.push(t);
    }
    return { ok: true, input: { ...input, items }, counts };
  }
  const messages = [];
  for (const m of input.messages) {
    const content = await run(m.content);
    if (typeof content !== 'string') return failed(content);
    let toolCalls = m.toolCalls;
    if (toolCalls) {
      const out = [];
      for (const call of toolCalls) {
        const args = await run(call.arguments);
        if (typeof args !== 'string') return failed(args);
        out.push({ ...call, arguments: args });
      }
      toolCalls = out;
    }
    messages.push({ ...m, content, ...(toolCalls ? { toolCalls } : {}) });
  }
  return { ok: true, input: { kind: 'chat', messages }, counts };
}

function failed(r: RedactionResult): RedactedInput {
  return r.ok ? { ok: false, reason: 'error' } : { ok: false, reason: r.reason, ...(r.error !== undefined ? { error: r.error } : {}) };
}

/** The prompt as one text for the content log: the text, or `role: content` lines (tool calls as `role → name(arguments)`). */
export function promptText(input: GenerationInput): string {
  if (input.kind === 'text') return input.text;
  if (input.kind === 'embedding') return input.items.map((i) => (typeof i === 'string' ? i : `[${i.length} token ids]`)).join('\n');
  const lines: string[] = [];
  for (const m of input.messages) {
    lines.push(`${m.role}: ${m.content}`);
    for (const c of m.toolCalls ?? []) lines.push(`${m.role} → ${c.name}(${c.arguments})`);
  }
  return lines.join('\n');
}
