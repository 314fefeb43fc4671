/**
 * Where Weir may send requests and credentials (issue 14, part 5): which environment
 * variables may hold an upstream credential, which hosts each credential may be sent to,
 * which hosts upstreams (and replicas) may live on, and where models may be downloaded from.
 *
 * The policy comes from the process environment only — the operator's — never from the
 * configuration file or the admin API, so a user who can change revisions cannot widen it. It
 * is read once at startup ({@link egressPolicyFromEnv}) and checked when configuration is
 * loaded (`parseConfig`), when an engine adapter is built and at connect time (the resolved
 * address, {@link createGuardedLookup}).
 */
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOneOptions } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { ConfigError, type ConfigProblem } from './config-error';

/**
 * One host rule of an allowlist, as written in `WEIR_UPSTREAM_HOSTS` /
 * `WEIR_MODEL_DOWNLOAD_HOSTS` / `WEIR_CREDENTIAL_HOSTS`:
 * - `api.openai.com` — that name exactly (case-insensitive);
 * - `*.example.com` — any name below `example.com` (not `example.com` itself);
 * - `10.0.0.0/8`, `fd00::/8`, `10.0.0.5` — an address range (CIDR) or one address;
 * - `loopback` — `localhost`, 127.0.0.0/8 and ::1;
 * - `*` — any name and any address, except the link-local / metadata ones (see {@link METADATA_RANGES}).
 */
export type HostRule =
  | { kind: 'name'; name: string }
  | { kind: 'suffix'; suffix: string }
  | { kind: 'cidr'; network: string; prefix: number; family: 'ipv4' | 'ipv6' }
  | { kind: 'loopback' }
  | { kind: 'any' };

/** The egress policy: see the module comment and docs/security.md, section 5. */
export interface EgressPolicy {
  /** `WEIR_CREDENTIAL_ENV_ALLOW` entries without `*`: variable names allowed exactly. */
  readonly credentialNames: ReadonlySet<string>;
  /** `WEIR_CREDENTIAL_ENV_ALLOW` entries ending in `*`: allowed name prefixes. */
  readonly credentialPrefixes: readonly string[];
  /**
   * `WEIR_CREDENTIAL_HOSTS`: a credential variable → the hosts it may be sent to. A credential
   * without an entry may be sent to any host {@link upstreamHosts} admits.
   */
  readonly credentialHosts: ReadonlyMap<string, readonly HostRule[]>;
  /** `WEIR_UPSTREAM_HOSTS`: hosts upstream base URLs and replicas may name. */
  readonly upstreamHosts: readonly HostRule[];
  /** `WEIR_MODEL_DOWNLOAD_HOSTS`: hosts a model download (and each of its redirects) may reach. */
  readonly modelDownloadHosts: readonly HostRule[];
  /** `WEIR_MODEL_DOWNLOAD_MAX_BYTES`: the largest model file downloaded (bytes). */
  readonly modelDownloadMaxBytes: number;
  /**
   * `WEIR_MODEL_DIRS`: absolute directories (symlinks resolved) a revision's `model_path` must
   * lie under, or undefined (unset: no restriction on `model_path`; see docs/security.md §5).
   */
  readonly modelDirs?: readonly string[];
}

/** Default `WEIR_CREDENTIAL_ENV_ALLOW`: the `WEIR_UPSTREAM_` prefix and the two providers' customary names. */
export const DEFAULT_CREDENTIAL_ENV_ALLOW = 'WEIR_UPSTREAM_*,OPENAI_API_KEY,ANTHROPIC_API_KEY';
/** Default `WEIR_CREDENTIAL_HOSTS`: each provider's customary key goes to that provider only. */
export const DEFAULT_CREDENTIAL_HOSTS = 'OPENAI_API_KEY=api.openai.com,ANTHROPIC_API_KEY=api.anthropic.com';
/** Default `WEIR_UPSTREAM_HOSTS`: this machine and the hosted providers Weir has adapters for. */
export const DEFAULT_UPSTREAM_HOSTS = 'loopback,api.openai.com,api.anthropic.com';
/** Default `WEIR_MODEL_DOWNLOAD_HOSTS`: Hugging Face (the default model's URL and its CDN redirects) and this machine. */
export const DEFAULT_MODEL_DOWNLOAD_HOSTS = 'huggingface.co,*.huggingface.co,*.hf.co,loopback';
/** Default `WEIR_MODEL_DOWNLOAD_MAX_BYTES`: 64 GiB (a 70B model at 6 bits fits; a runaway body does not fill the disk). */
export const DEFAULT_MODEL_DOWNLOAD_MAX_BYTES = 64 * 1024 ** 3;

/**
 * Addresses refused unless an allowlist names them (or a range inside them) explicitly, even
 * under `*` or `0.0.0.0/0`: IPv4 link-local (169.254.0.0/16, AWS/GCP/Azure metadata at
 * 169.254.169.254), IPv6 link-local (fe80::/10), AWS's IPv6 metadata (fd00:ec2::254) and
 * Alibaba Cloud's (100.100.100.200).
 */
export const METADATA_RANGES: readonly string[] = ['169.254.0.0/16', 'fe80::/10', 'fd00:ec2::254/128', '100.100.100.200/32'];
/** Names of cloud metadata services, refused unless an allowlist names them exactly. */
export const METADATA_NAMES: readonly string[] = ['metadata.google.internal', 'metadata.goog', 'metadata'];

/** Variables never allowed as a credential whatever the allowlist says: the database URL and Weir's own settings. */
function neverACredential(name: string): boolean {
  return name === 'DATABASE_URL' || (name.startsWith('WEIR_') && !name.startsWith('WEIR_UPSTREAM_'));
}

const metadataRanges = METADATA_RANGES.map(parseCidr);
const metadataBlockList = blockListOf(metadataRanges);

/**
 * Reads the policy from the environment (see the `DEFAULT_*` constants for unset variables).
 *
 * @throws {ConfigError} (source `environment`) naming each malformed variable.
 */
export function egressPolicyFromEnv(env: Record<string, string | undefined> = process.env): EgressPolicy {
  const problems: ConfigProblem[] = [];
  const get = (name: string, fallback: string) => {
    const v = env[name]?.trim();
    return v === undefined || v === '' ? fallback : v;
  };
  const list = (s: string) => s.split(',').map((x) => x.trim()).filter((x) => x !== '');
  const rules = (variable: string, s: string): HostRule[] =>
    list(s).flatMap((entry) => {
      const rule = parseHostRule(entry);
      if (typeof rule === 'string') {
        problems.push({ path: variable, message: rule });
        return [];
      }
      return [rule];
    });

  const credentialNames = new Set<string>();
  const credentialPrefixes: string[] = [];
  for (const entry of list(get('WEIR_CREDENTIAL_ENV_ALLOW', DEFAULT_CREDENTIAL_ENV_ALLOW))) {
    if (!/^(?:[A-Za-z_][A-Za-z0-9_]*\*?|\*)$/.test(entry)) {
      problems.push({ path: 'WEIR_CREDENTIAL_ENV_ALLOW', message: `"${entry}" is not a variable name or a prefix ending in * (e.g. WEIR_UPSTREAM_*)` });
    } else if (entry.endsWith('*')) credentialPrefixes.push(entry.slice(0, -1));
    else credentialNames.add(entry);
  }

  const credentialHosts = new Map<string, HostRule[]>();
  const bindings = [...list(DEFAULT_CREDENTIAL_HOSTS), ...list(env.WEIR_CREDENTIAL_HOSTS ?? '')];
  const explicit = new Set<string>();
  bindings.forEach((entry, i) => {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.+)$/.exec(entry);
    if (!m) {
      problems.push({ path: 'WEIR_CREDENTIAL_HOSTS', message: `"${entry}" is not NAME=host|host… (e.g. WEIR_UPSTREAM_OPENAI=api.openai.com)` });
      return;
    }
    const [, name, hosts] = m;
    const fromOperator = i >= list(DEFAULT_CREDENTIAL_HOSTS).length;
    // The operator's binding replaces the default one for that name.
    if (fromOperator && !explicit.has(name)) {
      credentialHosts.delete(name);
      explicit.add(name);
    }
    credentialHosts.set(name, [...(credentialHosts.get(name) ?? []), ...rules('WEIR_CREDENTIAL_HOSTS', hosts.split('|').join(','))]);
  });

  const upstreamHosts = rules('WEIR_UPSTREAM_HOSTS', get('WEIR_UPSTREAM_HOSTS', DEFAULT_UPSTREAM_HOSTS));
  const modelDownloadHosts = rules('WEIR_MODEL_DOWNLOAD_HOSTS', get('WEIR_MODEL_DOWNLOAD_HOSTS', DEFAULT_MODEL_DOWNLOAD_HOSTS));
  const maxRaw = get('WEIR_MODEL_DOWNLOAD_MAX_BYTES', String(DEFAULT_MODEL_DOWNLOAD_MAX_BYTES));
  const modelDownloadMaxBytes = Number(maxRaw);
  if (!/^\d+$/.test(maxRaw) || !Number.isSafeInteger(modelDownloadMaxBytes) || modelDownloadMaxBytes < 1) {
    problems.push({ path: 'WEIR_MODEL_DOWNLOAD_MAX_BYTES', message: `expected a whole number of bytes >= 1, got "${maxRaw}"` });
  }
  let modelDirs: string[] | undefined;
  const dirsRaw = env.WEIR_MODEL_DIRS?.trim();
  if (dirsRaw !== undefined && dirsRaw !== '') {
    modelDirs = [];
    for (const dir of list(dirsRaw)) {
      if (!path.isAbsolute(dir)) problems.push({ path: 'WEIR_MODEL_DIRS', message: `"${dir}" is not an absolute directory` });
      else modelDirs.push(realOrResolved(dir));
    }
  }
  if (problems.length > 0) throw new ConfigError('environment', problems);
  return { credentialNames, credentialPrefixes, credentialHosts, upstreamHosts, modelDownloadHosts, modelDownloadMaxBytes, ...(modelDirs ? { modelDirs } : {}) };
}

let processPolicy: EgressPolicy | undefined;
/** {@link egressPolicyFromEnv} of `process.env`, read once per process (the default of every check). */
export function processEgressPolicy(): EgressPolicy {
  return (processPolicy ??= egressPolicyFromEnv(process.env));
}

/**
 * Parses one allowlist entry (see {@link HostRule}).
 * @returns the rule, or a message saying what is wrong with the entry.
 */
export function parseHostRule(entry: string): HostRule | string {
  const e = entry.trim().toLowerCase();
  if (e === '*') return { kind: 'any' };
  if (e === 'loopback') return { kind: 'loopback' };
  if (e.includes('/') || isIP(stripBrackets(e)) !== 0) {
    const cidr = parseCidr(e.includes('/') ? e : `${stripBrackets(e)}/${isIP(stripBrackets(e)) === 4 ? 32 : 128}`);
    return cidr ?? `"${entry}" is not an address range such as 10.0.0.0/8 or fd00::/8`;
  }
  if (e.startsWith('*.') && /^[a-z0-9.-]+$/.test(e.slice(2)) && e.length > 2) return { kind: 'suffix', suffix: e.slice(1) };
  if (/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(e)) return { kind: 'name', name: e };
  return `"${entry}" is not a host name, *.domain, address, CIDR range, "loopback" or "*"`;
}

/**
 * Whether `host` (a URL's hostname: a name, an IPv4 address or a bracketed IPv6 address) is
 * admitted by `rules` as written — names by name, addresses by range. A metadata name or
 * address is admitted only by a rule naming it (or a range inside the metadata ranges), never
 * by `*` or a wider range. Resolved addresses are checked separately, at connect time
 * ({@link addressAllowed}).
 */
export function hostAllowed(rules: readonly HostRule[], host: string): boolean {
  const h = stripBrackets(host.toLowerCase()).replace(/\.$/, '');
  if (isIP(h) !== 0) return addressAllowed(rules, h, { requireListed: true });
  if (METADATA_NAMES.includes(h)) return rules.some((r) => r.kind === 'name' && r.name === h);
  return rules.some((r) => {
    switch (r.kind) {
      case 'any':
        return true;
      case 'loopback':
        return h === 'localhost' || h.endsWith('.localhost');
      case 'name':
        return r.name === h;
      case 'suffix':
        return h.endsWith(r.suffix);
      case 'cidr':
        return false;
    }
  });
}

/**
 * Whether a connection to `address` (an IP address, e.g. what a host name resolved to) is
 * allowed: an address in {@link METADATA_RANGES} only when a range of `rules` lies inside the
 * metadata range and holds it; with `requireListed` (an address written in a URL) any other
 * address must be in a rule's range (or `loopback`, or `*`); without it (a name already
 * admitted by name) any other address is allowed.
 */
export function addressAllowed(rules: readonly HostRule[], address: string, options: { requireListed?: boolean } = {}): boolean {
  const a = normalizeAddress(address);
  const family = isIP(a) === 6 ? 'ipv6' : 'ipv4';
  if (metadataBlockList.check(a, family)) {
    return rules.some(
      (r) => r.kind === 'cidr' && r.family === family && inRange(r, a) && metadataRanges.some((m) => m !== undefined && m.family === r.family && r.prefix >= m.prefix && inRange(m, r.network)),
    );
  }
  if (!options.requireListed) return true;
  return rules.some((r) => {
    if (r.kind === 'any') return true;
    if (r.kind === 'loopback') return family === 'ipv4' ? a.startsWith('127.') : a === '::1';
    if (r.kind === 'cidr') return r.family === family && inRange(r, a);
    return false;
  });
}

/**
 * Whether credential variable `name` may hold an upstream credential under `policy`.
 * @returns undefined when allowed, else a message naming the variable and how to allow it.
 */
export function credentialEnvProblem(policy: EgressPolicy, name: string): string | undefined {
  if (neverACredential(name)) {
    return `${name} cannot hold an upstream credential (the database URL and WEIR_ settings other than WEIR_UPSTREAM_* never can); put the key in a variable such as WEIR_UPSTREAM_${name.replace(/^WEIR_/, '')}`;
  }
  if (policy.credentialNames.has(name) || policy.credentialPrefixes.some((p) => name.startsWith(p))) return undefined;
  return `${name} is not an allowed credential variable: name one starting with ${policy.credentialPrefixes.map((p) => `${p}`).join(' or ') || '(no prefix allowed)'}, or add it to WEIR_CREDENTIAL_ENV_ALLOW in the service's environment`;
}

/**
 * The egress check of one upstream endpoint: `url`'s host must be admitted by the upstream
 * allowlist and, when `credentialEnv` is given, the variable must be allowed and bound to
 * that host (its `WEIR_CREDENTIAL_HOSTS` entry, else the upstream allowlist).
 *
 * @returns undefined when the call may be made with the credential, else a message saying what
 *   to change (never the credential's value).
 */
export function upstreamEgressProblem(policy: EgressPolicy, url: string, credentialEnv?: string): string | undefined {
  let host: string;
  try {
    host = new URL(url).hostname;
  } catch {
    return `${url} is not a URL`;
  }
  if (!hostAllowed(policy.upstreamHosts, host)) {
    return isMetadata(host)
      ? `${host} is a link-local or cloud metadata address; upstreams there are refused unless WEIR_UPSTREAM_HOSTS names it explicitly`
      : `${host} is not an allowed upstream host: add it (or its range) to WEIR_UPSTREAM_HOSTS in the service's environment`;
  }
  if (credentialEnv === undefined) return undefined;
  const nameProblem = credentialEnvProblem(policy, credentialEnv);
  if (nameProblem) return nameProblem;
  const bound = policy.credentialHosts.get(credentialEnv);
  if (bound && !hostAllowed(bound, host)) {
    return `the credential in ${credentialEnv} is bound to other hosts and is never sent to ${host}: use that credential's own host, or bind it in WEIR_CREDENTIAL_HOSTS (${credentialEnv}=${host})`;
  }
  return undefined;
}

/**
 * The egress problems of a configuration's revisions (snake_case, as in the file): each
 * hosted engine's `base_url` with its `api_key_env`, each replica's `base_url` (with the
 * revision's credential: the adapter sends it there too), and each llama.cpp `model_url`
 * against the model download hosts. Paths are the file's (`revisions[1].engine.api_key_env`).
 */
export function egressConfigProblems(
  policy: EgressPolicy,
  revisions: ReadonlyArray<{ engine: { kind: string; base_url?: string; api_key_env?: string; model_url?: string; model_path?: string }; replicas?: ReadonlyArray<{ base_url: string }> }>,
  baseDir: string = process.cwd(),
): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  revisions.forEach((r, i) => {
    const e = r.engine;
    if (e.model_path !== undefined) {
      const p = modelPathProblem(policy, path.resolve(baseDir, e.model_path));
      if (p) problems.push({ path: `revisions[${i}].engine.model_path`, message: p });
    }
    const credential = e.api_key_env;
    if (credential !== undefined) {
      const p = credentialEnvProblem(policy, credential);
      if (p) problems.push({ path: `revisions[${i}].engine.api_key_env`, message: p });
    }
    const nameOk = credential === undefined || credentialEnvProblem(policy, credential) === undefined;
    if (e.base_url !== undefined) {
      const p = upstreamEgressProblem(policy, e.base_url, nameOk ? credential : undefined);
      if (p) problems.push({ path: `revisions[${i}].engine.base_url`, message: p });
    }
    (r.replicas ?? []).forEach((replica, j) => {
      const p = upstreamEgressProblem(policy, replica.base_url, nameOk ? credential : undefined);
      if (p) problems.push({ path: `revisions[${i}].replicas[${j}].base_url`, message: p });
    });
    if (e.model_url !== undefined) {
      const p = modelDownloadHostProblem(policy, e.model_url);
      if (p) problems.push({ path: `revisions[${i}].engine.model_url`, message: p });
    }
  });
  return problems;
}

/**
 * Whether a model file may be read from `file` (absolute): with `WEIR_MODEL_DIRS` set, its real
 * path (symlinks and `..` resolved; for a missing file, its nearest existing parent's) must lie
 * under one of those directories. The message names no more than the path given.
 */
export function modelPathProblem(policy: EgressPolicy, file: string): string | undefined {
  if (policy.modelDirs === undefined) return undefined;
  if (isUnder(realOrResolved(file), policy.modelDirs)) return undefined;
  return `${file} is not under an allowed model directory: put the file in one of WEIR_MODEL_DIRS (the service's environment), or add its directory there`;
}

/** A revision's `model_path` as the configuration holds it (snake_case, possibly relative). */
type WithModelPath = { engine: { model_path?: string } };

/**
 * The `model_path`s an admin-API change introduces that it may not (issue 14): with
 * `WEIR_MODEL_DIRS` unset, a `model_path` the configuration did not already name must lie
 * (real path) under the directory of a `model_path` the configuration already names (the
 * operator's file seeded them, or an earlier checked change), under the model cache
 * (`<WEIR_DATA_DIR>/models`, default `.data/models`) or under `WEIR_MODEL_PATH`'s directory.
 * With `WEIR_MODEL_DIRS` set this returns nothing: {@link modelPathProblem} (run by `parseConfig`)
 * already confines every `model_path`. Paths are resolved against `baseDir`, as `parseConfig` does.
 * Admin changes only, never per request.
 */
export function newModelPathProblems(
  policy: EgressPolicy,
  before: ReadonlyArray<WithModelPath>,
  after: ReadonlyArray<WithModelPath>,
  env: Record<string, string | undefined> = process.env,
  baseDir: string = process.cwd(),
): ConfigProblem[] {
  if (policy.modelDirs !== undefined) return [];
  const known = new Set(before.flatMap((r) => (r.engine.model_path === undefined ? [] : [path.resolve(baseDir, r.engine.model_path)])));
  const allowed = [...known].map((f) => realOrResolved(path.dirname(f)));
  const dataDir = env.WEIR_DATA_DIR?.trim() || '.data';
  allowed.push(realOrResolved(path.join(path.resolve(dataDir), 'models')));
  const override = env.WEIR_MODEL_PATH?.trim();
  if (override) allowed.push(realOrResolved(path.dirname(path.resolve(override))));
  const problems: ConfigProblem[] = [];
  after.forEach((r, i) => {
    if (r.engine.model_path === undefined) return;
    const file = path.resolve(baseDir, r.engine.model_path);
    if (known.has(file) || isUnder(realOrResolved(file), allowed)) return;
    problems.push({
      path: `revisions[${i}].engine.model_path`,
      message: `${file} is not under a directory the configuration already uses for models, the model cache or WEIR_MODEL_PATH's directory; an operator can allow directories with WEIR_MODEL_DIRS`,
    });
  });
  return problems;
}

function isUnder(real: string, dirs: readonly string[]): boolean {
  return dirs.some((dir) => real === dir || real.startsWith(dir.endsWith(path.sep) ? dir : dir + path.sep));
}

/** `p`'s real path; for a path that does not exist, its nearest existing ancestor's real path joined with the rest. */
function realOrResolved(p: string): string {
  const abs = path.resolve(p);
  try {
    return realpathSync(abs);
  } catch {
    const parent = path.dirname(abs);
    return parent === abs ? abs : path.join(realOrResolved(parent), path.basename(abs));
  }
}

/** Whether a model may be downloaded from `url`'s host; a message saying how to allow it otherwise. */
export function modelDownloadHostProblem(policy: EgressPolicy, url: string): string | undefined {
  let host: string;
  try {
    host = new URL(url).hostname;
  } catch {
    return `${url} is not a URL`;
  }
  if (hostAllowed(policy.modelDownloadHosts, host)) return undefined;
  return `${host} is not an allowed model download host: add it to WEIR_MODEL_DOWNLOAD_HOSTS in the service's environment, or download the file yourself and set WEIR_MODEL_PATH`;
}

/** The error a refused connection fails with (`code` `EWEIREGRESS`). */
export class EgressRefusedError extends Error {
  readonly code = 'EWEIREGRESS';
  constructor(message: string) {
    super(message);
    this.name = 'EgressRefusedError';
  }
}

/** A `lookup` function as `net.connect`/`http.request`/undici's `connect` options take it. */
export type LookupFunction = (
  hostname: string,
  options: LookupOneOptions | LookupAllOptions | number,
  callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
) => void;

/**
 * A DNS lookup for outgoing connections that refuses, after resolving, an address `rules`
 * does not allow ({@link addressAllowed}: link-local / metadata addresses unless listed) with
 * an {@link EgressRefusedError}. It runs when a connection is made (not per request: a
 * keep-alive connection is reused), so a name that resolves to 169.254.169.254 — now or after
 * a DNS change — is never connected to. IP literals do not go through a lookup; they are
 * checked where the URL is ({@link hostAllowed}).
 *
 * @param resolve the underlying lookup. Default `dns.lookup`.
 */
export function createGuardedLookup(rules: readonly HostRule[], resolve: LookupFunction = dnsLookup as unknown as LookupFunction): LookupFunction {
  return (hostname, options, callback) => {
    const opts = typeof options === 'number' ? { family: options } : options;
    resolve(hostname, { ...opts, all: true }, (err, addresses) => {
      if (err) return callback(err, [] as LookupAddress[]);
      const list = addresses as LookupAddress[];
      const refused = list.find((a) => !addressAllowed(rules, a.address));
      if (refused) {
        return callback(
          new EgressRefusedError(
            `refused to connect to ${hostname}: it resolves to ${refused.address}, a link-local or cloud metadata address (allow it only by naming its range in the allowlist)`,
          ),
          [] as LookupAddress[],
        );
      }
      if ((opts as LookupAllOptions).all) return callback(null, list);
      const first = list[0];
      if (!first) return callback(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }), [] as LookupAddress[]);
      callback(null, first.address, first.family);
    });
  };
}

function isMetadata(host: string): boolean {
  const h = stripBrackets(host.toLowerCase());
  if (isIP(h) !== 0) {
    const a = normalizeAddress(h);
    return metadataBlockList.check(a, isIP(a) === 6 ? 'ipv6' : 'ipv4');
  }
  return METADATA_NAMES.includes(h);
}

function stripBrackets(h: string): string {
  return h.startsWith('[') && h.endsWith(']') ? h.slice(1, -1) : h;
}

/** An IPv4-mapped IPv6 address (`::ffff:a9fe:a9fe`, `::ffff:169.254.169.254`) as its IPv4 address. */
function normalizeAddress(address: string): string {
  const a = stripBrackets(address.toLowerCase());
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (dotted) return dotted[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(a);
  if (hex) {
    const hi = parseInt(hex[1], 16);
    const lo = parseInt(hex[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return a;
}

type Cidr = Extract<HostRule, { kind: 'cidr' }>;

function parseCidr(text: string): Cidr | undefined {
  const [addr, bits] = text.split('/');
  const network = normalizeAddress(addr ?? '');
  const version = isIP(network);
  const prefix = Number(bits);
  if (version === 0 || !/^\d+$/.test(bits ?? '') || prefix > (version === 4 ? 32 : 128)) return undefined;
  return { kind: 'cidr', network, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

function blockListOf(ranges: ReadonlyArray<Cidr | undefined>): BlockList {
  const list = new BlockList();
  for (const r of ranges) if (r) list.addSubnet(r.network, r.prefix, r.family);
  return list;
}

const rangeLists = new WeakMap<Cidr, BlockList>();
function inRange(range: Cidr, address: string): boolean {
  let list = rangeLists.get(range);
  if (!list) rangeLists.set(range, (list = blockListOf([range])));
  return list.check(address, range.family);
}
