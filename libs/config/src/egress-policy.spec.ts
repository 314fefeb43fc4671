import type { LookupAddress } from 'node:dns';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ConfigError, createGuardedLookup, egressPolicyFromEnv, hostAllowed, newModelPathProblems, parseConfig, parseHostRule, upstreamEgressProblem, type HostRule, type LookupFunction } from './index';

/** A configuration with one hosted revision whose engine is `engine` (snake_case). */
function withEngine(engine: Record<string, unknown>, replicas?: Array<Record<string, unknown>>): string {
  return JSON.stringify({
    revisions: [
      {
        id: 'up@1',
        model: 'up',
        engine: { kind: 'openai-compatible', upstream_model: 'm', ...engine },
        context_window: 8192,
        max_output_tokens: 1024,
        default_output_tokens: 512,
        pricing: { input_per_mtok: 1, output_per_mtok: 2 },
        ...(replicas ? { replicas } : {}),
      },
    ],
    aliases: [{ name: 'up', revision: 'up@1' }],
    tenants: [{ id: 't1', name: 'T', apps: [{ id: 'a1', name: 'A' }], allowed_aliases: ['*'] }],
  });
}

function problemsOf(text: string, env: Record<string, string> = {}): string[] {
  try {
    parseConfig(text, 'weir.json', { egress: egressPolicyFromEnv(env) });
  } catch (err) {
    if (err instanceof ConfigError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  return [];
}

describe('egress policy at config load', () => {
  it.each([
    ['DATABASE_URL', 'revisions[0].engine.api_key_env: DATABASE_URL cannot hold an upstream credential'],
    ['WEIR_SIGNING_KEY', 'revisions[0].engine.api_key_env: WEIR_SIGNING_KEY cannot hold an upstream credential'],
    ['HOME', 'revisions[0].engine.api_key_env: HOME is not an allowed credential variable: name one starting with WEIR_UPSTREAM_'],
  ])('refuses the credential variable %s, naming how to fix it', (name, message) => {
    const problems = problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: name }));
    expect(problems).toEqual([expect.stringContaining(message)]);
  });

  it('refuses DATABASE_URL and WEIR_ settings even when the operator allows every name', () => {
    const env = { WEIR_CREDENTIAL_ENV_ALLOW: '*' };
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'DATABASE_URL' }), env)).toHaveLength(1);
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'WEIR_SIGNING_KEY' }), env)).toHaveLength(1);
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'ANY_OTHER' }), env)).toEqual([]);
  });

  it('accepts allowed variables: the WEIR_UPSTREAM_ prefix, the providers\' names on their hosts, an explicit list', () => {
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'WEIR_UPSTREAM_VLLM' }))).toEqual([]);
    expect(problemsOf(withEngine({ base_url: 'https://api.openai.com/v1', api_key_env: 'OPENAI_API_KEY' }))).toEqual([]);
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'MY_KEY' }), { WEIR_CREDENTIAL_ENV_ALLOW: 'MY_KEY,TEAM_*' })).toEqual([]);
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'TEAM_X' }), { WEIR_CREDENTIAL_ENV_ALLOW: 'MY_KEY,TEAM_*' })).toEqual([]);
    // The explicit list replaces the default one.
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'WEIR_UPSTREAM_VLLM' }), { WEIR_CREDENTIAL_ENV_ALLOW: 'MY_KEY' })).toHaveLength(1);
  });

  it.each([
    ['http://169.254.169.254/latest/meta-data/v1', 'link-local or cloud metadata'],
    ['http://169.254.10.1:8000/v1', 'link-local or cloud metadata'],
    ['http://[fe80::1]:8000/v1', 'link-local or cloud metadata'],
    ['http://[fd00:ec2::254]/v1', 'link-local or cloud metadata'],
    ['http://100.100.100.200/v1', 'link-local or cloud metadata'],
    ['http://metadata.google.internal/v1', 'link-local or cloud metadata'],
    ['http://[::ffff:169.254.169.254]/v1', 'link-local or cloud metadata'],
    ['http://2852039166/v1', 'link-local or cloud metadata'], // 169.254.169.254 as one number
    ['https://evil.example/v1', 'evil.example is not an allowed upstream host: add it (or its range) to WEIR_UPSTREAM_HOSTS'],
  ])('refuses the base URL %s', (url, message) => {
    expect(problemsOf(withEngine({ base_url: url }))).toEqual([expect.stringContaining(message)]);
  });

  it('refuses metadata addresses under "*" and 0.0.0.0/0, and admits them only when named', () => {
    const wide = { WEIR_UPSTREAM_HOSTS: '*,0.0.0.0/0,::/0' };
    expect(problemsOf(withEngine({ base_url: 'http://169.254.169.254/v1' }), wide)).toHaveLength(1);
    expect(problemsOf(withEngine({ base_url: 'http://metadata.google.internal/v1' }), wide)).toHaveLength(1);
    expect(problemsOf(withEngine({ base_url: 'https://evil.example/v1' }), wide)).toEqual([]);
    expect(problemsOf(withEngine({ base_url: 'http://169.254.169.254/v1' }), { WEIR_UPSTREAM_HOSTS: '169.254.169.254' })).toEqual([]);
    expect(problemsOf(withEngine({ base_url: 'http://169.254.7.7/v1' }), { WEIR_UPSTREAM_HOSTS: '169.254.0.0/16' })).toEqual([]);
  });

  it('checks replicas too, with the revision\'s credential', () => {
    const replicas = [{ id: 'up@1/0', base_url: 'http://10.0.0.5:8000/v1', slots: 4 }];
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:8000/v1' }), {}).length).toBe(0);
    const text = withEngine({ base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'WEIR_UPSTREAM_VLLM' }, replicas);
    expect(problemsOf(text)).toEqual([expect.stringMatching(/^revisions\[0\]\.replicas\[0\]\.base_url: 10\.0\.0\.5 is not an allowed upstream host/)]);
    expect(problemsOf(text, { WEIR_UPSTREAM_HOSTS: 'loopback,10.0.0.0/8' })).toEqual([]);
  });

  it('sends a bound credential only to its hosts: an OpenAI key is refused for another allowed host', () => {
    const env = { WEIR_UPSTREAM_HOSTS: 'loopback,api.openai.com,llm.attacker.example' };
    expect(problemsOf(withEngine({ base_url: 'https://llm.attacker.example/v1', api_key_env: 'OPENAI_API_KEY' }), env)).toEqual([
      expect.stringContaining('the credential in OPENAI_API_KEY is bound to other hosts and is never sent to llm.attacker.example'),
    ]);
    const bound = { ...env, WEIR_CREDENTIAL_HOSTS: 'WEIR_UPSTREAM_VLLM=vllm.internal|127.0.0.1' };
    expect(problemsOf(withEngine({ base_url: 'https://llm.attacker.example/v1', api_key_env: 'WEIR_UPSTREAM_VLLM' }), bound)).toHaveLength(1);
    expect(problemsOf(withEngine({ base_url: 'http://127.0.0.1:9/v1', api_key_env: 'WEIR_UPSTREAM_VLLM' }), bound)).toEqual([]);
  });

  it('checks a llama.cpp model_url against the model download hosts', () => {
    const text = JSON.stringify({
      revisions: [
        {
          id: 'l@1',
          model: 'l',
          engine: { kind: 'llamacpp', model_url: 'https://files.attacker.example/m.gguf', model_sha256: 'a'.repeat(64) },
          context_window: 512,
          max_output_tokens: 256,
          default_output_tokens: 128,
          pricing: { input_per_mtok: 0, output_per_mtok: 0 },
        },
      ],
      aliases: [],
      tenants: [],
    });
    expect(problemsOf(text)).toEqual([expect.stringContaining('revisions[0].engine.model_url: files.attacker.example is not an allowed model download host')]);
    expect(problemsOf(text, { WEIR_MODEL_DOWNLOAD_HOSTS: '*.attacker.example' })).toEqual([]);
  });

  it('names malformed policy variables', () => {
    expect(() => egressPolicyFromEnv({ WEIR_UPSTREAM_HOSTS: 'ok.example,bad host', WEIR_CREDENTIAL_ENV_ALLOW: 'A-B', WEIR_MODEL_DOWNLOAD_MAX_BYTES: '1e9' })).toThrow(
      /WEIR_CREDENTIAL_ENV_ALLOW: "A-B"[\s\S]*WEIR_UPSTREAM_HOSTS: "bad host"[\s\S]*WEIR_MODEL_DOWNLOAD_MAX_BYTES/,
    );
  });
});

describe('host rules', () => {
  const rules = (s: string) => s.split(',').map((e) => parseHostRule(e) as HostRule);
  it.each([
    ['api.openai.com', 'api.openai.com', true],
    ['API.OpenAI.com', 'api.openai.com', true],
    ['*.example.com', 'a.b.example.com', true],
    ['*.example.com', 'example.com', false],
    ['*.example.com', 'evilexample.com', false],
    ['loopback', 'localhost', true],
    ['loopback', '127.3.4.5', true],
    ['loopback', '[::1]', true],
    ['loopback', '10.0.0.1', false],
    ['10.0.0.0/8', '10.200.0.1', true],
    ['10.0.0.0/8', '11.0.0.1', false],
    ['fd00::/8', '[fd12::1]', true],
    ['*', 'anything.example', true],
    ['*', '8.8.8.8', true],
  ])('%s admits %s: %s', (rule, host, expected) => {
    expect(hostAllowed(rules(rule), host)).toBe(expected);
  });

  it('an upstream URL with an allowed host and no credential passes', () => {
    expect(upstreamEgressProblem(egressPolicyFromEnv({}), 'http://127.0.0.1:1/v1')).toBeUndefined();
  });
});

describe('createGuardedLookup (connect time)', () => {
  const fakeDns =
    (table: Record<string, string[]>): LookupFunction =>
    (hostname, _options, callback) =>
      callback(null, (table[hostname] ?? []).map((address) => ({ address, family: address.includes(':') ? 6 : 4 })));
  const lookupAll = (fn: LookupFunction, host: string) =>
    new Promise<{ err: NodeJS.ErrnoException | null; addresses: LookupAddress[] | string }>((resolve) =>
      fn(host, { all: true }, (err, addresses) => resolve({ err, addresses })),
    );

  it('refuses a name that resolves to a link-local or metadata address, even under "*"', async () => {
    const dns = fakeDns({ 'sneaky.example': ['203.0.113.7', '169.254.169.254'], 'v6.example': ['fe80::1'], 'ok.example': ['203.0.113.7'] });
    const lookup = createGuardedLookup([{ kind: 'any' }], dns);
    const sneaky = await lookupAll(lookup, 'sneaky.example');
    expect(sneaky.err?.message).toMatch(/refused to connect to sneaky\.example: it resolves to 169\.254\.169\.254/);
    expect((sneaky.err as { code?: string }).code).toBe('EWEIREGRESS');
    expect((await lookupAll(lookup, 'v6.example')).err?.message).toMatch(/fe80::1/);
    expect(await lookupAll(lookup, 'ok.example')).toEqual({ err: null, addresses: [{ address: '203.0.113.7', family: 4 }] });
  });

  it('answers the single-address form net.connect uses without `all`', async () => {
    const lookup = createGuardedLookup([], fakeDns({ 'ok.example': ['203.0.113.7'] }));
    const got = await new Promise((resolve) => lookup('ok.example', {}, (err, address, family) => resolve({ err, address, family })));
    expect(got).toEqual({ err: null, address: '203.0.113.7', family: 4 });
  });
});

describe('model directories (WEIR_MODEL_DIRS, issue 14)', () => {
  let root: string;
  beforeAll(() => {
    root = realpathSync(mkdtempSync(path.join(tmpdir(), 'weir-model-dirs-')));
    mkdirSync(path.join(root, 'models'));
    mkdirSync(path.join(root, 'other'));
    writeFileSync(path.join(root, 'other', 'secret.txt'), 'root:x');
    symlinkSync(path.join(root, 'other', 'secret.txt'), path.join(root, 'models', 'link.gguf'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const revision = (modelPath: string) => `revisions:
  - id: m@1
    model: m
    engine: { kind: llamacpp, model_path: ${JSON.stringify(modelPath)} }
    context_window: 512
    max_output_tokens: 128
    default_output_tokens: 32
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
`;

  it('reads absolute directories, and refuses a relative one', () => {
    expect(egressPolicyFromEnv({}).modelDirs).toBeUndefined();
    expect(egressPolicyFromEnv({ WEIR_MODEL_DIRS: ` ${root}/models , /opt/models ` }).modelDirs).toEqual([path.join(root, 'models'), '/opt/models']);
    expect(() => egressPolicyFromEnv({ WEIR_MODEL_DIRS: 'models' })).toThrow(/WEIR_MODEL_DIRS: "models" is not an absolute directory/);
  });

  it('refuses at config load a model_path outside them (after resolving .. and symlinks), naming the field', () => {
    const egress = egressPolicyFromEnv({ WEIR_MODEL_DIRS: path.join(root, 'models') });
    expect(parseConfig(revision(path.join(root, 'models', 'a.gguf')), 'weir.yaml', { egress }).revisions[0].engine).toMatchObject({ modelPath: path.join(root, 'models', 'a.gguf') });
    expect(parseConfig(revision('a.gguf'), 'weir.yaml', { egress, baseDir: path.join(root, 'models') }).revisions).toHaveLength(1);
    for (const outside of ['/etc/shadow', path.join(root, 'models', '..', 'other', 'secret.txt'), path.join(root, 'models', 'link.gguf'), path.join(root, 'models-evil', 'a.gguf')]) {
      expect(() => parseConfig(revision(outside), 'weir.yaml', { egress })).toThrow(/revisions\[0\]\.engine\.model_path: .* is not under an allowed model directory/);
    }
    // Unset: the configuration file is the operator's and names any path.
    expect(parseConfig(revision('/etc/shadow'), 'weir.yaml', { egress: egressPolicyFromEnv({}) }).revisions).toHaveLength(1);
  });

  it('without WEIR_MODEL_DIRS an admin change may add a model_path only under a directory already used, the model cache or WEIR_MODEL_PATH’s directory', () => {
    const policy = egressPolicyFromEnv({});
    const rev = (p: string) => ({ engine: { model_path: p } });
    const env = { WEIR_DATA_DIR: path.join(root, 'data'), WEIR_MODEL_PATH: path.join(root, 'override', 'm.gguf') };
    const before = [rev(path.join(root, 'models', 'a.gguf')), rev('/srv/legacy/l.gguf')];
    const ok = [rev(path.join(root, 'models', 'b.gguf')), rev(path.join(root, 'data', 'models', 'c.gguf')), rev(path.join(root, 'override', 'd.gguf')), rev('/srv/legacy/l.gguf')];
    expect(newModelPathProblems(policy, before, [...before, ...ok], env)).toEqual([]);
    const bad = [rev('/etc/shadow'), rev(path.join(root, 'models', 'link.gguf')), rev(path.join(root, 'other', 'x.gguf'))];
    expect(newModelPathProblems(policy, before, [...before, ...bad], env).map((p) => p.path)).toEqual(['revisions[2].engine.model_path', 'revisions[3].engine.model_path', 'revisions[4].engine.model_path']);
    // With WEIR_MODEL_DIRS set, parseConfig confines every path instead.
    expect(newModelPathProblems(egressPolicyFromEnv({ WEIR_MODEL_DIRS: root }), before, bad, env)).toEqual([]);
  });
});
