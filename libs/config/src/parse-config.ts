import { readFileSync } from 'node:fs';
import path from 'node:path';
import {
  type AdmissionLimits,
  type AliasSpec,
  BATCH_POOL,
  defaultCapabilities,
  type EngineSpec,
  INTERACTIVE_POOL,
  type PlatformConfig,
  type RedactionProfileConfig,
  type RevisionCapabilities,
  type RevisionSpec,
  type TenantCachePolicy,
  type TenantSpec,
  type TenantModeration,
  type ModerationEngineSpec,
  slugOfInternalId,
} from '@weir/core';
import { parseSemanticCachePolicy, SEMANTIC_THRESHOLD_DEFAULT, SEMANTIC_TTL_DEFAULT_MS } from '@weir/cache';
import { moderationPolicyProblems, rulesProblems } from '@weir/moderation';
import { BUILT_IN_PROFILE_NAMES, compileProfile } from '@weir/redaction';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { ConfigError, describeValue, formatPath, type ConfigProblem } from './config-error';
import { configFileSchema, KNOWN_KEYS, knownKeysFromMessage, type ConfigFile } from './config-schema';
import { egressConfigProblems, processEgressPolicy, upstreamEgressProblem, type EgressPolicy } from './egress-policy';

/** Options of {@link parseConfig}. */
export interface ParseConfigOptions {
  /**
   * Directory against which relative `engine.model_path`s are resolved. Default: the current
   * working directory (`loadConfigFile` passes the config file's own directory).
   */
  baseDir?: string;
  /** `yaml` or `json`; default: chosen from `sourceName`'s extension, else from the content. */
  format?: 'yaml' | 'json';
  /**
   * The egress policy the revisions' upstreams, credentials and model URLs are checked
   * against (`egress-policy.ts`). Default: the process environment's ({@link processEgressPolicy}).
   */
  egress?: EgressPolicy;
}

/**
 * Parses and validates a configuration document (YAML or JSON, snake_case keys) into the
 * camelCase {@link PlatformConfig}. Runs once at startup, never per request.
 *
 * Defaults are applied as `@weir/core`'s `platform-config.ts` documents them, then the
 * cross-checks run: unique revision ids, alias names, tenant ids and app ids; each alias names
 * existing revisions (each at most once) with a positive total weight (each weight a finite
 * number from 0 to `MAX_ALIAS_TARGET_WEIGHT`, 1,000,000, checked by the schema); each tenant's
 * `allowed_aliases` exist (or are `*`); `default_output_tokens ≤ max_output_tokens <
 * context_window`; a llama.cpp engine names `model_path` or `model_url`, a `model_url` comes
 * with `model_sha256`, and `context_size` (default `context_window`) is at least
 * `context_window`; an anthropic engine lists no `replicas`; pools are `interactive`, `batch`
 * or a tenant's `dedicated_pool`, some replica serves each tenant's `dedicated_pool`, and no
 * revision an alias targets runs only in `batch`; a revision's `deprecation.replacement` is
 * another existing revision that does not retire on or before it, and `announced_on` comes
 * before `retires_on`; each credential variable (`api_key_env`), upstream `base_url`, replica
 * `base_url` and `model_url` passes the egress policy (`options.egress`: allowed credential
 * variables bound to their hosts, allowed upstream and download hosts, no link-local or
 * metadata address). Cross-checks run only once the document matches the schema.
 *
 * @param text the document.
 * @param sourceName the file name used in messages (e.g. `weir.yaml`); its extension picks the format.
 * @throws {ConfigError} listing every problem as `<sourceName>: <field path>: <message>`.
 */
export function parseConfig(text: string, sourceName: string, options: ParseConfigOptions = {}): PlatformConfig {
  const format = options.format ?? detectFormat(sourceName, text);
  const raw = format === 'json' ? parseJson(text, sourceName) : parseYaml(text, sourceName);

  const result = configFileSchema.safeParse(raw, { error: fallbackMessage });
  if (!result.success) throw new ConfigError(sourceName, issuesToProblems(result.error.issues));

  const egress = options.egress ?? processEgressPolicy();
  const problems = [...crossCheck(result.data), ...egressConfigProblems(egress, result.data.revisions, options.baseDir ?? process.cwd())];
  // A moderation upstream obeys the same egress policy as a model upstream: host and credential allowlists.
  result.data.defaults.moderation_engines.forEach((e, i) => {
    if (e.kind !== 'openai') return;
    const p = upstreamEgressProblem(egress, e.base_url, e.api_key_env);
    if (p) problems.push({ path: `defaults.moderation_engines[${i}]`, message: p });
  });
  if (problems.length > 0) throw new ConfigError(sourceName, problems);

  return toPlatformConfig(result.data, options.baseDir ?? process.cwd());
}

/**
 * Reads and parses a configuration file (see {@link parseConfig}); relative model paths are
 * resolved against the file's directory. Synchronous: it runs once at startup.
 *
 * @param filePath path of a `.yaml`, `.yml` or `.json` file (other extensions: sniffed).
 * @throws {ConfigError} when the file cannot be read or is invalid.
 */
export function loadConfigFile(filePath: string): PlatformConfig {
  let text: string;
  try {
    text = readFileSync(filePath, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new ConfigError(
      filePath,
      [{ path: '', message: `cannot read the config file (${code}); check the path in WEIR_CONFIG, or unset it to use the built-in default` }],
      { cause: err },
    );
  }
  return parseConfig(text, filePath, { baseDir: path.dirname(path.resolve(filePath)) });
}

function detectFormat(sourceName: string, text: string): 'yaml' | 'json' {
  const ext = path.extname(sourceName).toLowerCase();
  if (ext === '.json') return 'json';
  if (ext === '.yaml' || ext === '.yml') return 'yaml';
  return /^\s*[{[]/.test(text) ? 'json' : 'yaml';
}

function parseJson(text: string, sourceName: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ConfigError(sourceName, [{ path: '', message: `invalid JSON: ${(err as Error).message}` }], { cause: err });
  }
}

function parseYaml(text: string, sourceName: string): unknown {
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(
      sourceName,
      doc.errors.map((e) => {
        const pos = e.linePos?.[0];
        const where = pos ? `line ${pos.line}, column ${pos.col}` : '';
        const message = e.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
        return { path: where, message: `invalid YAML: ${message}` };
      }),
    );
  }
  return doc.toJS({ maxAliasCount: 1000 });
}

/** Messages for issues whose schema sets none (containers, unions, unknown keys). */
function fallbackMessage(iss: { code?: string; input?: unknown; expected?: unknown; values?: unknown }): string {
  const expected: Record<string, string> = {
    array: 'a list',
    object: 'a mapping',
    string: 'a string',
    number: 'a number',
    boolean: 'true or false',
  };
  if (iss.code === 'invalid_type') {
    const desc = expected[String(iss.expected)] ?? String(iss.expected);
    return iss.input === undefined ? `required (${desc})` : `expected ${desc}, got ${describeValue(iss.input)}`;
  }
  if (iss.code === 'invalid_value' && Array.isArray(iss.values)) {
    const desc = iss.values.map((v) => JSON.stringify(v)).join(', ');
    return iss.input === undefined ? `required (${desc})` : `expected ${iss.values.length === 1 ? desc : `one of ${desc}`}, got ${describeValue(iss.input)}`;
  }
  return iss.input === undefined ? 'invalid value' : `invalid value ${describeValue(iss.input)}`;
}

function issuesToProblems(issues: readonly z.core.$ZodIssue[]): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const iss of issues) {
    if (iss.code === 'unrecognized_keys') {
      for (const key of iss.keys) {
        const siblings = knownKeysFromMessage(iss.message);
        problems.push({ path: formatPath([...iss.path, key]), message: `unknown key${unknownKeyHint(key, siblings)}` });
      }
    } else {
      problems.push({ path: formatPath(iss.path), message: iss.message });
    }
  }
  return problems;
}

/** A hint for an unknown key: a snake_case spelling or a near miss, preferring the object's own keys. */
function unknownKeyHint(key: string, siblings: readonly string[]): string {
  if (key === 'api_key' || key === 'apiKey') {
    return ': never put a secret in the config file; put it in an environment variable and name that variable in api_key_env';
  }
  const snake = key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').replace(/-/g, '_').toLowerCase();
  if (snake !== key && (siblings.includes(snake) || KNOWN_KEYS.has(snake))) return ` (did you mean "${snake}"? keys are snake_case)`;
  // A near miss among this object's own keys wins over a closer key valid elsewhere.
  const best = nearest(snake, siblings) ?? nearest(snake, KNOWN_KEYS);
  return best ? ` (did you mean "${best}"?)` : '';
}

function nearest(key: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const known of candidates) {
    const d = editDistance(key, known);
    if (d < bestDistance) {
      best = known;
      bestDistance = d;
    }
  }
  return best;
}

/** Levenshtein distance; the inputs are short key names. */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[b.length];
}

function crossCheck(file: ConfigFile): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const add = (p: PropertyKey[], message: string) => problems.push({ path: formatPath(p), message });
  problems.push(...redactionProblems(file));

  const revisionIds = firstIndexes(file.revisions.map((r) => r.id), (i, first) =>
    add(['revisions', i, 'id'], `duplicate revision id (also revisions[${first}].id)`),
  );
  const revisionById = new Map(file.revisions.map((r) => [r.id, r]));
  file.revisions.forEach((r, i) => {
    if (r.kind === 'embedding' && r.engine.kind !== 'llamacpp' && r.engine.kind !== 'openai-compatible') {
      add(['revisions', i, 'kind'], `an embedding revision needs a llamacpp or openai-compatible engine (this one is ${describeValue(r.engine.kind)}, which serves no embeddings)`);
    }
    if (r.embedding !== undefined && r.kind !== 'embedding') add(['revisions', i, 'embedding'], 'only for an embedding revision: add `kind: embedding`, or remove `embedding`');
    if (r.embedding?.variable_dimensions === true && r.engine.kind !== 'openai-compatible') {
      add(['revisions', i, 'embedding', 'variable_dimensions'], 'only an openai-compatible upstream can shorten embeddings (a llama.cpp model returns its own size)');
    }
    const d = r.deprecation;
    if (d !== undefined) {
      const at = ['revisions', i, 'deprecation'];
      const replacement = revisionById.get(d.replacement);
      if (d.replacement === r.id) add([...at, 'replacement'], 'must name another revision (a revision cannot replace itself)');
      else if (!replacement) add([...at, 'replacement'], `unknown revision ${describeValue(d.replacement)}${known(revisionIds)}`);
      else if (replacement.deprecation !== undefined && replacement.deprecation.retires_on <= d.retires_on) {
        add(
          [...at, 'replacement'],
          `revision ${describeValue(d.replacement)} retires on ${replacement.deprecation.retires_on}, no later than this one (${d.retires_on}): it would be retired when clients must move to it; name a revision that outlives this one`,
        );
      }
      if (d.announced_on !== undefined && d.announced_on >= d.retires_on) {
        add([...at, 'announced_on'], `must be before retires_on (${d.announced_on} is not before ${d.retires_on}): the countdown runs from the announcement to the retirement`);
      }
    }
    if (r.default_output_tokens > r.max_output_tokens) {
      add(['revisions', i, 'default_output_tokens'], `must be <= max_output_tokens (${r.default_output_tokens} > ${r.max_output_tokens})`);
    }
    if (r.max_output_tokens >= r.context_window) {
      add(['revisions', i, 'max_output_tokens'], `must be < context_window (${r.max_output_tokens} >= ${r.context_window}), leaving room for the prompt`);
    }
    const e = r.engine;
    if (e.kind === 'llamacpp') {
      // Neither model_path nor model_url is fine here: WEIR_MODEL_PATH stands in for the file,
      // and resolveModelFile says what to set when nothing names one.
      if (e.model_url !== undefined && e.model_sha256 === undefined) {
        add(['revisions', i, 'engine', 'model_sha256'], 'required when model_url is set (a download is verified against it)');
      }
      if (e.context_size !== undefined && e.context_size < r.context_window) {
        add(['revisions', i, 'engine', 'context_size'], `must be >= context_window (${e.context_size} < ${r.context_window}), or a request that fits the window would not fit the engine`);
      }
    }
    if (e.kind === 'anthropic' && r.replicas !== undefined && r.replicas.length > 0) {
      // Replicas are Weir engine servers (OpenAI-compatible, probed on /healthz, counted with
      // /tokenize); none speaks the Messages API. The API itself is the revision's one replica.
      add(['revisions', i, 'replicas'], 'not allowed for an anthropic engine: the revision is served by its engine.base_url (replicas are Weir engine servers, which speak the OpenAI-compatible API)');
    }
    if (e.kind === 'simulated') {
      e.decode_step_ms.forEach(([batch], j) => {
        const previous = j > 0 ? e.decode_step_ms[j - 1][0] : 0;
        if (batch <= previous) add(['revisions', i, 'engine', 'decode_step_ms', j], `batch sizes must increase (${batch} after ${previous})`);
      });
      if (e.kv_tokens < r.context_window) {
        add(['revisions', i, 'engine', 'kv_tokens'], `must be >= context_window (${e.kv_tokens} < ${r.context_window}), or a request that fits the window would never fit the replica`);
      }
    }
  });

  const aliasNames = firstIndexes(file.aliases.map((a) => a.name), (i, first) =>
    add(['aliases', i, 'name'], `duplicate alias name (also aliases[${first}].name)`),
  );
  file.aliases.forEach((a, i) => {
    if (a.targets !== undefined && a.revision !== undefined) {
      add(['aliases', i], 'set either targets or revision (the shorthand for one target), not both');
      return;
    }
    if (a.targets === undefined && a.revision === undefined) {
      add(['aliases', i], 'set targets ([{revision, weight}]) or revision (one revision id)');
      return;
    }
    if (a.revision !== undefined) {
      if (!revisionIds.has(a.revision)) add(['aliases', i, 'revision'], `unknown revision ${describeValue(a.revision)}${known(revisionIds)}`);
      return;
    }
    const targets = a.targets ?? [];
    if (targets.length === 0) add(['aliases', i, 'targets'], 'expected at least one target');
    const seen = new Set<string>();
    targets.forEach((t, j) => {
      if (!revisionIds.has(t.revision)) add(['aliases', i, 'targets', j, 'revision'], `unknown revision ${describeValue(t.revision)}${known(revisionIds)}`);
      else if (seen.has(t.revision)) add(['aliases', i, 'targets', j, 'revision'], `revision ${describeValue(t.revision)} is listed twice`);
      seen.add(t.revision);
    });
    if (targets.length > 0 && targets.reduce((s, t) => s + t.weight, 0) <= 0) {
      add(['aliases', i, 'targets'], 'the weights must add up to more than 0');
    }
    // One alias serves one kind: a canary split between an embedding and a text model would answer half its requests with 400.
    const kinds = new Set(targets.flatMap((t) => (revisionById.has(t.revision) ? [revisionById.get(t.revision)?.kind ?? 'generation'] : [])));
    if (kinds.size > 1) add(['aliases', i, 'targets'], 'mixes embedding and generation revisions; an alias serves one kind');
  });

  firstIndexes(
    file.revisions.flatMap((r) => (r.replicas ?? []).map((x) => x.id)),
    (i) => add(['revisions'], `duplicate replica id (number ${i + 1} among all replicas); replica ids are unique across revisions`),
  );
  firstIndexes(file.tenants.map((t) => t.id), (i, first) => add(['tenants', i, 'id'], `duplicate tenant id (also tenants[${first}].id)`));
  // Pools: `interactive`, `batch`, or a dedicated pool some tenant is assigned to.
  const dedicated = new Set(file.tenants.flatMap((t) => (t.dedicated_pool !== undefined ? [t.dedicated_pool] : [])));
  file.tenants.forEach((t, i) => {
    if (t.dedicated_pool === 'interactive' || t.dedicated_pool === 'batch') {
      add(['tenants', i, 'dedicated_pool'], `"${t.dedicated_pool}" is a shared pool; name the tenant's own pool (for example "${t.id}-dedicated")`);
    }
  });
  const checkPool = (p: PropertyKey[], pool: string | undefined) => {
    if (pool !== undefined && pool !== 'interactive' && pool !== 'batch' && !dedicated.has(pool)) {
      add(p, `unknown pool ${describeValue(pool)}: use "interactive", "batch", or a pool named by a tenant's dedicated_pool`);
    }
  };
  file.revisions.forEach((r, i) => {
    checkPool(['revisions', i, 'pool'], r.pool);
    if (r.kv_tokens !== undefined && r.kv_tokens < r.context_window) {
      add(['revisions', i, 'kv_tokens'], `must be >= context_window (${r.kv_tokens} < ${r.context_window}), or a request that fits the window would never fit the replica`);
    }
    (r.replicas ?? []).forEach((x, j) => {
      checkPool(['revisions', i, 'replicas', j, 'pool'], x.pool);
      if (x.kv_tokens !== undefined && x.kv_tokens < r.context_window) {
        add(['revisions', i, 'replicas', j, 'kv_tokens'], `must be >= context_window (${x.kv_tokens} < ${r.context_window}), or a request that fits the window would never fit the replica`);
      }
    });
  });
  // Fallback chains: known revisions, each with every capability of the revisions it stands in
  // for (a request that may land on any of them must be servable by the fallback).
  const capsById = new Map(file.revisions.map((r) => [r.id, capabilitiesFromFile(r)]));
  const kindById = new Map(file.revisions.map((r) => [r.id, r.kind ?? 'generation']));
  const targetsOf = (a: ConfigFile['aliases'][number]) => (a.revision !== undefined ? [a.revision] : (a.targets ?? []).map((t) => t.revision));

  // Pools that replicas serve, placed as serving-replicas.ts's replicaPlacement does: a
  // replica's pool, else its revision's, else interactive; a revision without replicas is one
  // in-process replica in the revision's pool. A tenant with a dedicated pool runs only there
  // (the scheduler's laneFor), so a pool no replica serves would refuse every request it sends.
  const poolsOf = (r: ConfigFile['revisions'][number]): string[] => {
    const own = r.pool ?? INTERACTIVE_POOL;
    return r.replicas !== undefined && r.replicas.length > 0 ? r.replicas.map((x) => x.pool ?? own) : [own];
  };
  const servedPools = new Set(file.revisions.flatMap(poolsOf));
  file.tenants.forEach((t, i) => {
    const pool = t.dedicated_pool;
    if (pool === undefined || pool === INTERACTIVE_POOL || pool === BATCH_POOL || servedPools.has(pool)) return;
    add(
      ['tenants', i, 'dedicated_pool'],
      `no replica is in pool ${describeValue(pool)}, so this tenant's requests could never run (a tenant with a dedicated pool runs only there): set pool: ${pool} on a revision or on some of its replicas`,
    );
  });
  // Interactive requests (the default priority) run in the interactive pool (or a tenant's
  // dedicated one), never in batch: a revision whose every replica is in batch leaves an alias
  // targeting it nowhere to run them.
  file.aliases.forEach((a, i) => {
    targetsOf(a).forEach((rev, j) => {
      const first = revisionIds.get(rev);
      if (first === undefined) return;
      const pools = poolsOf(file.revisions[first]);
      if (!pools.every((p) => p === BATCH_POOL)) return;
      add(
        a.revision !== undefined ? ['aliases', i, 'revision'] : ['aliases', i, 'targets', j, 'revision'],
        `alias ${describeValue(a.name)} targets revision ${describeValue(rev)}, whose ${pools.length === 1 ? 'replica is' : `${pools.length} replicas are all`} in the "batch" pool: interactive requests to the alias (the default priority) would have no pool to run in; put the revision or one of its replicas in the "interactive" pool, or target another revision`,
      );
    });
  });
  const checkChain = (chain: string[], primaries: string[], at: (string | number)[]) => {
    const seen = new Set<string>();
    chain.forEach((rev, j) => {
      if (!revisionIds.has(rev)) return add([...at, j], `unknown revision ${describeValue(rev)}${known(revisionIds)}`);
      if (seen.has(rev)) return add([...at, j], `revision ${describeValue(rev)} is listed twice`);
      seen.add(rev);
      // A fallback serves the same kind as what it stands in for (an embedding revision cannot answer a chat, nor the reverse).
      const kind = kindById.get(rev);
      const other = primaries.find((primary) => kindById.has(primary) && kindById.get(primary) !== kind);
      if (other !== undefined) return add([...at, j], `revision ${describeValue(rev)} is ${kind === 'embedding' ? 'an embedding' : 'a generation'} revision, but ${describeValue(other)} is ${kind === 'embedding' ? 'a generation' : 'an embedding'} revision: a fallback must serve the same kind`);
      const caps = capsById.get(rev) as RevisionCapabilities;
      for (const primary of primaries) {
        const need = capsById.get(primary);
        if (!need) continue;
        const missing = (['streaming', 'tools', 'jsonOutput'] as const).filter((c) => need[c] && !caps[c]);
        if (missing.length > 0) {
          add([...at, j], `revision ${describeValue(rev)} lacks ${missing.map(capabilityName).join(', ')}, which ${describeValue(primary)} offers: a request using it could not fall back there (declare the capability on the revision, or choose another fallback)`);
        }
      }
    });
  };
  const aliasByName = new Map(file.aliases.map((a) => [a.name, a]));
  file.aliases.forEach((a, i) => {
    if (!a.fallbacks) return;
    checkChain(a.fallbacks, targetsOf(a), ['aliases', i, 'fallbacks']);
    // Falling back to the only revision the alias routes to retries the failing revision itself.
    const targets = targetsOf(a);
    if (targets.length === 1) a.fallbacks.forEach((rev, j) => rev === targets[0] && add(['aliases', i, 'fallbacks', j], `revision ${describeValue(rev)} is the alias's own revision; a fallback must be another revision`));
  });
  file.tenants.forEach((t, i) => {
    const seenRoutes = new Map<string, number>();
    t.routes.forEach((r, j) => {
      const at = ['tenants', i, 'routes', j];
      const key = `${r.alias}\u0000${r.use_case ?? ''}`;
      const first = seenRoutes.get(key);
      if (first !== undefined) add(at, `duplicate route for alias ${describeValue(r.alias)}${r.use_case ? ` and use case ${describeValue(r.use_case)}` : ''} (also tenants[${i}].routes[${first}])`);
      else seenRoutes.set(key, j);
      const alias = aliasByName.get(r.alias);
      if (!alias) return add([...at, 'alias'], `unknown alias ${describeValue(r.alias)}${known(aliasNames)}`);
      if (!t.allowed_aliases.includes('*') && !t.allowed_aliases.includes(r.alias)) add([...at, 'alias'], `alias ${describeValue(r.alias)} is not in this tenant's allowed_aliases`);
      if (r.pin === undefined && r.fallbacks === undefined) add(at, 'set pin (a revision id), fallbacks (revision ids), or both');
      if (r.pin !== undefined && !revisionIds.has(r.pin)) add([...at, 'pin'], `unknown revision ${describeValue(r.pin)}${known(revisionIds)}`);
      if (r.fallbacks) checkChain(r.fallbacks, r.pin !== undefined ? [r.pin] : targetsOf(alias), [...at, 'fallbacks']);
      if (r.fallbacks && r.pin !== undefined) r.fallbacks.forEach((rev, k) => rev === r.pin && add([...at, 'fallbacks', k], `revision ${describeValue(rev)} is the pinned revision; a fallback must be another revision`));
    });
    // Use cases: unique names; the model an alias the tenant may use; the pin and fallbacks
    // revisions, held to the same capability rule as a route's chain; no route for the same
    // alias and use case (the use case's chain would silently replace it).
    const seenUseCases = new Map<string, number>();
    t.use_cases.forEach((u, j) => {
      const at = ['tenants', i, 'use_cases', j];
      const first = seenUseCases.get(u.name);
      if (first !== undefined) add([...at, 'name'], `duplicate use case ${describeValue(u.name)} (also tenants[${i}].use_cases[${first}])`);
      else seenUseCases.set(u.name, j);
      const alias = aliasByName.get(u.model);
      if (!alias) return add([...at, 'model'], `unknown alias ${describeValue(u.model)}${known(aliasNames)}`);
      if (!t.allowed_aliases.includes('*') && !t.allowed_aliases.includes(u.model)) add([...at, 'model'], `alias ${describeValue(u.model)} is not in this tenant's allowed_aliases`);
      const route = seenRoutes.get(`${u.model}\u0000${u.name}`);
      if (route !== undefined) add(at, `tenants[${i}].routes[${route}] also routes alias ${describeValue(u.model)} for use case ${describeValue(u.name)}; keep the pin and fallbacks on the use case only`);
      if (u.pin !== undefined && !revisionIds.has(u.pin)) add([...at, 'pin'], `unknown revision ${describeValue(u.pin)}${known(revisionIds)}`);
      if (u.fallbacks) checkChain(u.fallbacks, u.pin !== undefined ? [u.pin] : targetsOf(alias), [...at, 'fallbacks']);
      if (u.fallbacks && u.pin !== undefined) u.fallbacks.forEach((rev, k) => rev === u.pin && add([...at, 'fallbacks', k], `revision ${describeValue(rev)} is the pinned revision; a fallback must be another revision`));
    });
  });

  // The semantic cache: the semantic lib's own rules (threshold floor, an existing embedding
  // revision, TTL range), so a file, an admin change and a snapshot are held to one rule.
  const revisionKind = (id: string) => {
    const r = revisionById.get(id);
    return r === undefined ? undefined : (r.kind ?? 'generation');
  };
  file.tenants.forEach((t, i) => {
    if (t.cache?.semantic === undefined) return;
    const at = formatPath(['tenants', i, 'cache', 'semantic']);
    const parsed = parseSemanticCachePolicy(t.cache.semantic, at, revisionKind);
    if (parsed.ok) return;
    for (const e of parsed.errors) {
      const split = e.indexOf(': ');
      problems.push(split > 0 ? { path: e.slice(0, split), message: e.slice(split + 2) } : { path: at, message: e });
    }
  });

  // Moderation: engine names resolve, rules compile with RE2, overlap below the window.
  const engineNames = new Set<string>();
  file.defaults.moderation_engines.forEach((e, i) => {
    if (engineNames.has(e.name)) add(['defaults', 'moderation_engines', i, 'name'], `duplicate moderation engine ${describeValue(e.name)}`);
    engineNames.add(e.name);
    if (e.kind === 'rules') for (const p of rulesProblems(e.rules)) add(['defaults', 'moderation_engines', i], p);
  });
  file.tenants.forEach((t, i) => {
    if (t.moderation === undefined) return;
    for (const p of moderationPolicyProblems(toModeration(t.moderation), file.defaults.moderation_engines.map(toModerationEngine))) add(['tenants', i], p);
  });

  const appIds = new Map<string, string>();
  file.tenants.forEach((t, i) => {
    if (t.uid !== undefined && slugOfInternalId(t.uid) !== t.id) add(['tenants', i, 'uid'], `internal id ${describeValue(t.uid)} was not made for tenant ${describeValue(t.id)}`);
    t.apps.forEach((app, j) => {
      if (app.uid !== undefined && slugOfInternalId(app.uid) !== app.id) add(['tenants', i, 'apps', j, 'uid'], `internal id ${describeValue(app.uid)} was not made for app ${describeValue(app.id)}`);
      const other = appIds.get(app.id);
      if (other !== undefined) add(['tenants', i, 'apps', j, 'id'], `duplicate app id (also ${other}); app ids are unique across tenants`);
      else appIds.set(app.id, formatPath(['tenants', i, 'apps', j, 'id']));
    });
    t.allowed_aliases.forEach((name, j) => {
      if (name !== '*' && !aliasNames.has(name)) {
        add(['tenants', i, 'allowed_aliases', j], `unknown alias ${describeValue(name)}${known(aliasNames)} (or "*" for all)`);
      }
    });
  });
  return problems;
}

/** A file revision's capabilities: the declared ones over its engine kind's defaults. */
function capabilitiesFromFile(r: ConfigFile['revisions'][number]): RevisionCapabilities {
  const defaults = defaultCapabilities({ kind: r.engine.kind } as EngineSpec);
  return {
    streaming: r.capabilities?.streaming ?? defaults.streaming,
    tools: r.capabilities?.tools ?? defaults.tools,
    jsonOutput: r.capabilities?.json_output ?? defaults.jsonOutput,
  };
}

const capabilityName = (c: keyof RevisionCapabilities) => (c === 'jsonOutput' ? 'json_output' : c);

/** Maps each value to the index of its first occurrence, reporting later duplicates. */
function firstIndexes(values: string[], onDuplicate: (index: number, firstIndex: number) => void): Map<string, number> {
  const first = new Map<string, number>();
  values.forEach((v, i) => {
    const seen = first.get(v);
    if (seen === undefined) first.set(v, i);
    else onDuplicate(i, seen);
  });
  return first;
}

function known(names: Map<string, number>): string {
  const list = [...names.keys()];
  if (list.length === 0) return '';
  const shown = list.slice(0, 10).map((n) => JSON.stringify(n)).join(', ');
  return ` (known: ${shown}${list.length > 10 ? ', …' : ''})`;
}

/** The file's `redaction_profiles` as {@link RedactionProfileConfig}s (name order as written). */
function toRedactionProfiles(profiles: ConfigFile['redaction_profiles']): RedactionProfileConfig[] {
  return Object.entries(profiles).map(([name, p]) => ({
    name,
    recognizers: [...p.recognizers],
    ...(p.custom_patterns.length > 0 ? { customPatterns: p.custom_patterns.map((c) => ({ name: c.name, pattern: c.pattern })) } : {}),
    replacement: p.replacement,
    ...(p.entropy_min_length !== undefined ? { entropyMinLength: p.entropy_min_length } : {}),
    ...(p.redact_uuids !== undefined ? { redactUuids: p.redact_uuids } : {}),
  }));
}

/**
 * Redaction cross-checks: every profile compiles (recognizer ids known, custom patterns valid RE2
 * that cannot match the empty string; `@weir/redaction` `compileProfile`), no profile redefines a
 * built-in one, a tenant's `redaction_profile` names a defined or built-in profile, and
 * `redact_upstream` comes with a profile.
 */
function redactionProblems(file: ConfigFile): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const add = (p: PropertyKey[], message: string) => problems.push({ path: formatPath(p), message });
  for (const spec of toRedactionProfiles(file.redaction_profiles)) {
    const at = ['redaction_profiles', spec.name];
    if (BUILT_IN_PROFILE_NAMES.includes(spec.name)) {
      add(at, `'${spec.name}' is a built-in profile and cannot be redefined; choose another name`);
      continue;
    }
    const compiled = compileProfile(spec);
    if (!compiled.ok) {
      for (const e of compiled.errors) {
        const colon = e.indexOf(': ');
        // `custom_patterns[0].pattern: …` → path redaction_profiles.<name>.custom_patterns[0].pattern
        const field = e.slice(0, colon).replace(/\[(\d+)\]/g, '.$1').split('.');
        add([...at, ...field.map((f) => (/^\d+$/.test(f) ? Number(f) : f))], e.slice(colon + 2));
      }
    }
  }
  const names = new Set([...BUILT_IN_PROFILE_NAMES, ...Object.keys(file.redaction_profiles)]);
  file.tenants.forEach((t, i) => {
    if (t.redaction_profile !== undefined && !names.has(t.redaction_profile)) {
      add(['tenants', i, 'redaction_profile'], `unknown redaction profile ${describeValue(t.redaction_profile)}; use one of ${[...names].join(', ')} (or define it under redaction_profiles)`);
    }
    if (t.redact_upstream && t.redaction_profile === undefined) add(['tenants', i, 'redact_upstream'], 'needs redaction_profile: the profile that redacts prompts before they are sent upstream');
    t.use_cases.forEach((u, j) => {
      if (u.redaction_profile !== undefined && !names.has(u.redaction_profile)) {
        add(['tenants', i, 'use_cases', j, 'redaction_profile'], `unknown redaction profile ${describeValue(u.redaction_profile)}; use one of ${[...names].join(', ')} (or define it under redaction_profiles)`);
      }
    });
  });
  return problems;
}

function toPlatformConfig(file: ConfigFile, baseDir: string): PlatformConfig {
  return {
    revisions: file.revisions.map((r): RevisionSpec => ({
      id: r.id,
      model: r.model,
      engine: toEngine(r.engine, r.context_window, baseDir),
      ...(r.kind !== undefined ? { kind: r.kind } : {}),
      ...(r.embedding !== undefined ? { embedding: { dimensions: r.embedding.dimensions, variableDimensions: r.embedding.variable_dimensions ?? false } } : {}),
      contextWindow: r.context_window,
      maxOutputTokens: r.max_output_tokens,
      defaultOutputTokens: r.default_output_tokens,
      pricing: {
        inputPerMTok: r.pricing.input_per_mtok,
        outputPerMTok: r.pricing.output_per_mtok,
        cachedInputPerMTok: r.pricing.cached_input_per_mtok ?? r.pricing.input_per_mtok,
        cacheWriteInputPerMTok: r.pricing.cache_write_input_per_mtok ?? r.pricing.input_per_mtok,
        reasoningPerMTok: r.pricing.reasoning_per_mtok ?? r.pricing.output_per_mtok,
      },
      ...(r.replicas
        ? {
            replicas: r.replicas.map((x) => ({
              id: x.id,
              baseUrl: x.base_url,
              slots: x.slots,
              ...(x.pool !== undefined ? { pool: x.pool } : {}),
              ...(x.kv_tokens !== undefined ? { kvTokens: x.kv_tokens } : {}),
            })),
          }
        : {}),
      ...(r.pool !== undefined ? { pool: r.pool } : {}),
      ...(r.kv_tokens !== undefined ? { kvTokens: r.kv_tokens } : {}),
      ...(r.capabilities !== undefined ? { capabilities: capabilitiesFromFile(r) } : {}),
      ...(r.deprecation !== undefined
        ? {
            deprecation: {
              retiresOn: r.deprecation.retires_on,
              replacement: r.deprecation.replacement,
              ...(r.deprecation.announced_on !== undefined ? { announcedOn: r.deprecation.announced_on } : {}),
            },
          }
        : {}),
    })),
    aliases: file.aliases.map((a): AliasSpec => ({
      name: a.name,
      targets: a.revision !== undefined ? [{ revision: a.revision, weight: 1 }] : (a.targets ?? []).map((t) => ({ revision: t.revision, weight: t.weight })),
      ...(a.description !== undefined ? { description: a.description } : {}),
      ...(a.fallbacks !== undefined ? { fallbacks: [...a.fallbacks] } : {}),
    })),
    tenants: file.tenants.map((t): TenantSpec => ({
      id: t.id,
      name: t.name,
      ...(t.uid !== undefined ? { uid: t.uid } : {}),
      apps: t.apps.map((app) => ({ id: app.id, name: app.name, ...(app.uid !== undefined ? { uid: app.uid } : {}), limits: toLimits(app.limits) })),
      allowedAliases: [...t.allowed_aliases],
      defaultDeadlineMs: t.default_deadline_ms,
      limits: { ...toLimits(t.limits), maxConcurrent: t.limits.max_concurrent },
      ...(t.scheduling_weight !== undefined ? { schedulingWeight: t.scheduling_weight } : {}),
      ...(t.dedicated_pool !== undefined ? { dedicatedPool: t.dedicated_pool } : {}),
      ...(t.disabled ? { disabled: true } : {}),
      ...(t.kill_switch ? { killSwitch: true } : {}),
      ...(t.content_logging ? { contentLogging: true } : {}),
      ...(t.redaction_profile !== undefined ? { redactionProfile: t.redaction_profile } : {}),
      ...(t.moderation !== undefined ? { moderation: toModeration(t.moderation) } : {}),
      ...(t.redact_upstream ? { redactUpstream: true } : {}),
      ...cachePolicyOf(t.cache),
      ...(t.use_cases.length > 0
        ? {
            useCases: t.use_cases.map((u) => ({
              name: u.name,
              model: u.model,
              ...(u.pin !== undefined ? { pin: u.pin } : {}),
              ...(u.fallbacks !== undefined ? { fallbacks: [...u.fallbacks] } : {}),
              limits: toLimits(u.limits),
              ...(u.redaction_profile !== undefined ? { redactionProfile: u.redaction_profile } : {}),
            })),
          }
        : {}),
      ...(t.routes.length > 0
        ? {
            routes: t.routes.map((r) => ({
              alias: r.alias,
              ...(r.use_case !== undefined ? { useCase: r.use_case } : {}),
              ...(r.pin !== undefined ? { pin: r.pin } : {}),
              ...(r.fallbacks !== undefined ? { fallbacks: [...r.fallbacks] } : {}),
            })),
          }
        : {}),
    })),
    ...(file.defaults.moderation_engines.length > 0 ? { moderationEngines: file.defaults.moderation_engines.map(toModerationEngine) } : {}),
    ...(Object.keys(file.redaction_profiles).length > 0 ? { redactionProfiles: toRedactionProfiles(file.redaction_profiles) } : {}),
    defaults: {
      cancelGraceMs: file.defaults.cancel_grace_ms,
      maxBodyBytes: file.defaults.max_body_bytes,
      maxBodyDepth: file.defaults.max_body_depth,
      sseHeartbeatMs: file.defaults.sse_heartbeat_ms,
      maxQueuePerReplica: file.defaults.max_queue_per_replica,
      scheduling: {
        maxQueueBytesPerReplica: file.defaults.scheduling.max_queue_bytes_per_replica,
        tenantQueueShare: file.defaults.scheduling.tenant_queue_share,
        quantumTokens: file.defaults.scheduling.quantum_tokens,
        priorPrefillTokensPerS: file.defaults.scheduling.prior_prefill_tokens_per_s,
        priorDecodeTokensPerS: file.defaults.scheduling.prior_decode_tokens_per_s,
        ewmaAlpha: file.defaults.scheduling.ewma_alpha,
        pushbackMs: file.defaults.scheduling.pushback_ms,
        fairShareHeadroom: file.defaults.scheduling.fair_share_headroom,
        ...(file.defaults.scheduling.tpot_target_ms !== undefined ? { tpotTargetMs: file.defaults.scheduling.tpot_target_ms } : {}),
      },
      admission: {
        reservationGraceMs: file.defaults.admission.reservation_grace_ms,
        idempotencyRetentionMs: file.defaults.admission.idempotency_retention_ms,
        burnRateFactor: file.defaults.admission.burn_rate_factor,
        burnRateBaselineHours: file.defaults.admission.burn_rate_baseline_hours,
        burnRateMinHourlyUsd: file.defaults.admission.burn_rate_min_hourly_usd,
      },
      circuitBreaker: {
        windowMs: file.defaults.circuit_breaker.window_ms,
        errorRate: file.defaults.circuit_breaker.error_rate,
        minRequests: file.defaults.circuit_breaker.min_requests,
        openMs: file.defaults.circuit_breaker.open_ms,
        halfOpenProbes: file.defaults.circuit_breaker.half_open_probes,
        ...(file.defaults.circuit_breaker.slow_call_ms !== null ? { slowCallMs: file.defaults.circuit_breaker.slow_call_ms } : {}),
        slowCallRate: file.defaults.circuit_breaker.slow_call_rate,
      },
      cache: {
        exactStore: file.defaults.cache.exact_store,
        maxBytes: file.defaults.cache.max_bytes,
        ...(file.defaults.cache.max_bytes_per_tenant !== undefined ? { maxBytesPerTenant: file.defaults.cache.max_bytes_per_tenant } : {}),
        lookupTimeoutMs: file.defaults.cache.lookup_timeout_ms,
        semanticStore: file.defaults.cache.semantic_store ?? file.defaults.cache.exact_store,
        semanticLookupTimeoutMs: file.defaults.cache.semantic_lookup_timeout_ms,
      },
    },
  };
}

/**
 * A tenant's `cache` section → `TenantSpec.cache`, only when a tier is enabled: a tenant whose
 * policy is off carries none, so the request path pays one property read for it.
 */
function cachePolicyOf(c: ConfigFile['tenants'][number]['cache']): { cache?: TenantCachePolicy } {
  if (!c || (!c.exact.enabled && !c.semantic?.enabled)) return {};
  return {
    cache: {
      exact: { enabled: c.exact.enabled, ttlMs: c.exact.ttl_ms },
      ...(c.semantic
        ? {
            semantic: {
              enabled: c.semantic.enabled,
              ttlMs: c.semantic.ttl_ms ?? (c.exact.enabled ? c.exact.ttl_ms : SEMANTIC_TTL_DEFAULT_MS),
              threshold: c.semantic.threshold ?? SEMANTIC_THRESHOLD_DEFAULT,
              ...(c.semantic.embedding_revision !== undefined ? { embeddingRevision: c.semantic.embedding_revision } : {}),
            },
          }
        : {}),
      deterministicOnly: c.deterministic_only,
      allowOptIn: c.allow_opt_in,
      ...(c.templates !== undefined ? { templates: [...c.templates] } : {}),
      hitPriceFraction: c.hit_price_fraction,
      ...(c.personalised_use_cases !== undefined ? { personalisedUseCases: [...c.personalised_use_cases] } : {}),
    },
  };
}

/** snake_case limits → {@link AdmissionLimits}, leaving absent limits out. */
function toLimits(l: ConfigFile['tenants'][number]['apps'][number]['limits']): AdmissionLimits {
  const out: AdmissionLimits = {};
  if (l.max_concurrent !== undefined) out.maxConcurrent = l.max_concurrent;
  if (l.requests_per_minute !== undefined) out.requestsPerMinute = l.requests_per_minute;
  if (l.tokens_per_minute !== undefined) out.tokensPerMinute = l.tokens_per_minute;
  if (l.input_tokens_per_minute !== undefined) out.inputTokensPerMinute = l.input_tokens_per_minute;
  if (l.output_tokens_per_minute !== undefined) out.outputTokensPerMinute = l.output_tokens_per_minute;
  if (l.monthly_budget_usd !== undefined) out.monthlyBudgetUsd = l.monthly_budget_usd;
  if (l.daily_budget_usd !== undefined) out.dailyBudgetUsd = l.daily_budget_usd;
  if (l.session_max_tokens !== undefined) out.sessionMaxTokens = l.session_max_tokens;
  if (l.session_budget_usd !== undefined) out.sessionBudgetUsd = l.session_budget_usd;
  if (l.session_idle_ttl_ms !== undefined) out.sessionIdleTtlMs = l.session_idle_ttl_ms;
  return out;
}

function toEngine(e: ConfigFile['revisions'][number]['engine'], contextWindow: number, baseDir: string): EngineSpec {
  switch (e.kind) {
    case 'llamacpp':
      return {
        kind: 'llamacpp',
        ...(e.model_path !== undefined ? { modelPath: path.resolve(baseDir, e.model_path) } : {}),
        ...(e.model_sha256 !== undefined ? { modelSha256: e.model_sha256 } : {}),
        ...(e.model_url !== undefined ? { modelUrl: e.model_url } : {}),
        threads: e.threads,
        sequences: e.sequences,
        contextSize: e.context_size ?? contextWindow,
        testTokenDelayMs: e.test_token_delay_ms,
      };
    case 'openai-compatible':
      return {
        kind: 'openai-compatible',
        baseUrl: e.base_url,
        upstreamModel: e.upstream_model,
        ...(e.api_key_env !== undefined ? { apiKeyEnv: e.api_key_env } : {}),
        api: e.api,
        firstTokenTimeoutMs: e.first_token_timeout_ms,
        idleTimeoutMs: e.idle_timeout_ms,
        maxConcurrency: e.max_concurrency,
        ...(e.continuous_usage_stats ? { continuousUsageStats: true } : {}),
        ...(e.tokenizer !== 'none' ? { tokenizer: e.tokenizer } : {}),
      };
    case 'anthropic':
      return {
        kind: 'anthropic',
        baseUrl: e.base_url,
        upstreamModel: e.upstream_model,
        ...(e.api_key_env !== undefined ? { apiKeyEnv: e.api_key_env } : {}),
        firstTokenTimeoutMs: e.first_token_timeout_ms,
        idleTimeoutMs: e.idle_timeout_ms,
        maxConcurrency: e.max_concurrency,
        ...(e.tokenizer !== 'none' ? { tokenizer: e.tokenizer } : {}),
      };
    case 'simulated':
      return {
        kind: 'simulated',
        prefillTokensPerSecond: e.prefill_tokens_per_second,
        decodeStepMs: e.decode_step_ms.map(([batch, ms]) => [batch, ms] as [number, number]),
        kvTokens: e.kv_tokens,
        maxSequences: e.max_sequences,
        seed: e.seed,
      };
    default: {
      const unreachable: never = e;
      throw new Error(`unknown engine kind ${JSON.stringify(unreachable)}`);
    }
  }
}

/** A tenant's moderation policy from the file's snake_case. */
export function toModeration(m: NonNullable<ConfigFile['tenants'][number]['moderation']>): TenantModeration {
  return {
    ...(m.input ? { input: { engine: m.input.engine, ...(m.input.block_on ? { blockOn: [...m.input.block_on] } : {}), fail: m.input.fail, timeoutMs: m.input.timeout_ms } } : {}),
    ...(m.output
      ? { output: { engine: m.output.engine, ...(m.output.block_on ? { blockOn: [...m.output.block_on] } : {}), windowChars: m.output.window_chars, overlapChars: m.output.overlap_chars, fail: m.output.fail, timeoutMs: m.output.timeout_ms } }
      : {}),
    ...(m.rules ? { rules: { ...(m.rules.lists ? { lists: m.rules.lists.map((l) => ({ category: l.category, phrases: [...l.phrases] })) } : {}), ...(m.rules.patterns ? { patterns: m.rules.patterns.map((p) => ({ ...p })) } : {}) } } : {}),
  };
}

function toModerationEngine(e: ConfigFile['defaults']['moderation_engines'][number]): ModerationEngineSpec {
  if (e.kind === 'rules') return { name: e.name, kind: 'rules', ...(e.rules ? { rules: e.rules } : {}) };
  return { name: e.name, kind: 'openai', baseUrl: e.base_url, ...(e.api_key_env !== undefined ? { apiKeyEnv: e.api_key_env } : {}), ...(e.model !== undefined ? { model: e.model } : {}), timeoutMs: e.timeout_ms };
}
