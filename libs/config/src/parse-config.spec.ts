/* eslint-disable @typescript-eslint/no-explicit-any -- the fixture is mutated freely to build invalid documents */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { ConfigError, defaultConfig, loadConfigFile, parseConfig, resolveModelFile } from './index';

/** A valid file (snake_case) exercising both engine kinds; each case below breaks one thing. */
function validFile(): Record<string, any> {
  return {
    revisions: [
      {
        id: 'tiny@1',
        model: 'tiny',
        engine: { kind: 'llamacpp', model_path: '/models/tiny.gguf' },
        context_window: 512,
        max_output_tokens: 256,
        default_output_tokens: 128,
        pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 },
      },
      {
        id: 'gpt@1',
        model: 'gpt',
        engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'm', api_key_env: 'WEIR_UPSTREAM_KEY' },
        context_window: 8192,
        max_output_tokens: 1024,
        default_output_tokens: 512,
        pricing: { input_per_mtok: 1, output_per_mtok: 2, cached_input_per_mtok: 0.5 },
      },
    ],
    aliases: [
      { name: 'tiny', revision: 'tiny@1' },
      { name: 'canary', targets: [{ revision: 'tiny@1', weight: 9 }, { revision: 'gpt@1', weight: 1 }] },
    ],
    tenants: [{ id: 't1', name: 'Team one', apps: [{ id: 'app1', name: 'App one' }], allowed_aliases: ['tiny'] }],
  };
}

function errorOf(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('parseConfig: valid documents', () => {
  it('parses YAML and JSON forms to the same config, with defaults applied', () => {
    const fromYaml = parseConfig(stringify(validFile()), 'weir.yaml');
    const fromJson = parseConfig(JSON.stringify(validFile()), 'weir.json');
    expect(fromJson).toEqual(fromYaml);
    // Sniffed from the content when the extension says nothing.
    expect(parseConfig(JSON.stringify(validFile()), 'config')).toEqual(fromYaml);
    expect(parseConfig(stringify(validFile()), 'config')).toEqual(fromYaml);

    const [tiny, gpt] = fromYaml.revisions;
    expect(tiny.engine).toEqual({
      kind: 'llamacpp',
      modelPath: '/models/tiny.gguf',
      threads: 1,
      sequences: 4,
      contextSize: 512,
      testTokenDelayMs: 0,
    });
    // Class prices default: cache reads and writes to the input price, reasoning to the output price.
    expect(tiny.pricing).toEqual({ inputPerMTok: 0.1, outputPerMTok: 0.2, cachedInputPerMTok: 0.1, cacheWriteInputPerMTok: 0.1, reasoningPerMTok: 0.2 });
    expect(gpt.engine).toEqual({
      kind: 'openai-compatible',
      baseUrl: 'http://127.0.0.1:8000/v1',
      upstreamModel: 'm',
      apiKeyEnv: 'WEIR_UPSTREAM_KEY',
      api: 'chat',
      firstTokenTimeoutMs: 30_000,
      idleTimeoutMs: 30_000,
      maxConcurrency: 16,
    });
    expect(gpt.pricing).toEqual({ inputPerMTok: 1, outputPerMTok: 2, cachedInputPerMTok: 0.5, cacheWriteInputPerMTok: 1, reasoningPerMTok: 2 });
    expect(fromYaml.aliases).toEqual([
      { name: 'tiny', targets: [{ revision: 'tiny@1', weight: 1 }] },
      { name: 'canary', targets: [{ revision: 'tiny@1', weight: 9 }, { revision: 'gpt@1', weight: 1 }] },
    ]);
    expect(fromYaml.tenants).toEqual([
      { id: 't1', name: 'Team one', apps: [{ id: 'app1', name: 'App one', limits: {} }], allowedAliases: ['tiny'], defaultDeadlineMs: 120_000, limits: { maxConcurrent: 64 } },
    ]);
    expect(fromYaml.defaults).toEqual({
      cancelGraceMs: 250,
      maxBodyBytes: 1_048_576,
      maxBodyDepth: 64,
      sseHeartbeatMs: 15_000,
      maxQueuePerReplica: 256,
      scheduling: { maxQueueBytesPerReplica: 16_777_216, tenantQueueShare: 0.5, quantumTokens: 256, priorPrefillTokensPerS: 1_000, priorDecodeTokensPerS: 20, ewmaAlpha: 0.2, pushbackMs: 1_000, fairShareHeadroom: 0.1 },
      admission: { reservationGraceMs: 60_000, idempotencyRetentionMs: 86_400_000, burnRateFactor: 3, burnRateBaselineHours: 24, burnRateMinHourlyUsd: 1 },
      circuitBreaker: { windowMs: 10_000, errorRate: 0.2, minRequests: 20, openMs: 5_000, halfOpenProbes: 3, slowCallMs: 10_000, slowCallRate: 0.8 },
      cache: { exactStore: 'memory', maxBytes: 67_108_864, lookupTimeoutMs: 50, semanticStore: 'memory', semanticLookupTimeoutMs: 250 },
    });
  });

  it('reads the internal ids a control-plane snapshot gives tenants and apps, and refuses one made for another id (issue 14 §4)', () => {
    const file = validFile();
    file.tenants[0].uid = 't1~0123456789abcdef';
    file.tenants[0].apps[0].uid = 'app1';
    const config = parseConfig(JSON.stringify(file), 'snapshot');
    expect(config.tenants[0]).toMatchObject({ id: 't1', uid: 't1~0123456789abcdef', apps: [{ id: 'app1', uid: 'app1' }] });
    // A configuration file names none.
    expect(parseConfig(JSON.stringify(validFile()), 'file').tenants[0].uid).toBeUndefined();
    file.tenants[0].uid = 'acme~0123456789abcdef';
    expect(errorOf(() => parseConfig(JSON.stringify(file), 'snapshot')).problems).toEqual([
      expect.objectContaining({ path: 'tenants[0].uid', message: expect.stringContaining('was not made for tenant "t1"') }),
    ]);
    file.tenants[0].uid = 't1';
    file.tenants[0].apps[0].uid = 'app1~XYZ';
    expect(errorOf(() => parseConfig(JSON.stringify(file), 'snapshot')).problems).toEqual([
      expect.objectContaining({ path: 'tenants[0].apps[0].uid', message: expect.stringContaining('expected an internal id') }),
    ]);
  });

  it('reads admission limits of tenants and apps, and the admission defaults', () => {
    const file = validFile();
    file.tenants = [
      {
        id: 't',
        name: 'T',
        limits: { max_concurrent: 8, requests_per_minute: 600, tokens_per_minute: 90_000, input_tokens_per_minute: 60_000, output_tokens_per_minute: 30_000, monthly_budget_usd: 250.5, daily_budget_usd: 20 },
        apps: [{ id: 'a', name: 'A', limits: { max_concurrent: 2, monthly_budget_usd: 10 } }],
      },
    ];
    (file as Record<string, unknown>).defaults = { admission: { reservation_grace_ms: 5_000, idempotency_retention_ms: 3_600_000, burn_rate_factor: 2.5, burn_rate_baseline_hours: 48, burn_rate_min_hourly_usd: 0 } };
    const cfg = parseConfig(JSON.stringify(file), 'w.json');
    expect(cfg.tenants[0].limits).toEqual({
      maxConcurrent: 8,
      requestsPerMinute: 600,
      tokensPerMinute: 90_000,
      inputTokensPerMinute: 60_000,
      outputTokensPerMinute: 30_000,
      monthlyBudgetUsd: 250.5,
      dailyBudgetUsd: 20,
    });
    expect(cfg.tenants[0].apps[0].limits).toEqual({ maxConcurrent: 2, monthlyBudgetUsd: 10 });
    expect(cfg.defaults.admission).toEqual({ reservationGraceMs: 5_000, idempotencyRetentionMs: 3_600_000, burnRateFactor: 2.5, burnRateBaselineHours: 48, burnRateMinHourlyUsd: 0 });
  });

  it('refuses bad admission limits, naming the field', () => {
    const file = validFile();
    file.tenants = [{ id: 't', name: 'T', limits: { requests_per_minute: 0, monthly_budget_usd: -1 }, apps: [{ id: 'a', name: 'A', limits: { tokens_per_minute: 1.5, budget: 3 } }] }];
    (file as Record<string, unknown>).defaults = { admission: { burn_rate_factor: 1 } };
    let message = '';
    try {
      parseConfig(JSON.stringify(file), 'w.json');
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toContain('tenants[0].limits.requests_per_minute');
    expect(message).toContain('tenants[0].limits.monthly_budget_usd');
    expect(message).toContain('tenants[0].apps[0].limits.tokens_per_minute');
    expect(message).toContain('budget');
    expect(message).toContain('defaults.admission.burn_rate_factor');
  });

  it('defaults allowed_aliases to ["*"], apps to [] and aliases/tenants to []', () => {
    const file = validFile();
    file.tenants = [{ id: 't', name: 'T' }];
    expect(parseConfig(JSON.stringify(file), 'w.json').tenants[0]).toMatchObject({ apps: [], allowedAliases: ['*'] });
    const bare = { revisions: [validFile().revisions[0]] };
    const cfg = parseConfig(JSON.stringify(bare), 'w.json');
    expect(cfg.aliases).toEqual([]);
    expect(cfg.tenants).toEqual([]);
  });

  it('treats an empty optional section (YAML null) as absent', () => {
    const text = `${stringify({ revisions: [validFile().revisions[0]] })}aliases:\ntenants:\n  - id: t\n    name: T\n    apps:\n    limits:\ndefaults:\n`;
    const cfg = parseConfig(text, 'w.yaml');
    expect(cfg.aliases).toEqual([]);
    expect(cfg.tenants[0]).toMatchObject({ apps: [], limits: { maxConcurrent: 64 } });
    expect(cfg.defaults.cancelGraceMs).toBe(250);
  });

  it('resolves a relative model_path against baseDir, and loadConfigFile against the file', () => {
    const file = validFile();
    file.revisions[0].engine.model_path = 'models/tiny.gguf';
    expect(parseConfig(stringify(file), 'w.yaml', { baseDir: '/srv' }).revisions[0].engine).toMatchObject({ modelPath: '/srv/models/tiny.gguf' });

    const dir = mkdtempSync(path.join(tmpdir(), 'weir-config-'));
    try {
      const p = path.join(dir, 'weir.yml');
      writeFileSync(p, stringify(file));
      expect(loadConfigFile(p).revisions[0].engine).toMatchObject({ modelPath: path.join(dir, 'models/tiny.gguf') });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads remote replicas of a revision (split topology) and refuses duplicate replica ids', () => {
    const file = validFile();
    file.revisions[0].replicas = [
      { id: 'tiny@1/0', base_url: 'http://127.0.0.1:9001/v1', slots: 4 },
      { id: 'tiny@1/1', base_url: 'http://127.0.0.1:9002/v1', slots: 2 },
    ];
    const config = parseConfig(JSON.stringify(file), 'weir.json');
    expect(config.revisions[0].replicas).toEqual([
      { id: 'tiny@1/0', baseUrl: 'http://127.0.0.1:9001/v1', slots: 4 },
      { id: 'tiny@1/1', baseUrl: 'http://127.0.0.1:9002/v1', slots: 2 },
    ]);
    expect(config.revisions[1].replicas).toBeUndefined();
    file.revisions[1].replicas = [{ id: 'tiny@1/0', base_url: 'http://127.0.0.1:9003/v1', slots: 1 }];
    expect(errorOf(() => parseConfig(JSON.stringify(file), 'weir.json')).message).toContain('duplicate replica id');
    file.revisions[1].replicas = [{ id: 'x', base_url: 'not a url', slots: 0 }];
    const bad = errorOf(() => parseConfig(JSON.stringify(file), 'weir.json')).message;
    expect(bad).toContain('revisions[1].replicas[0].base_url');
    expect(bad).toContain('revisions[1].replicas[0].slots');
  });

  it('lowercases model_sha256', () => {
    const file = validFile();
    file.revisions[0].engine.model_sha256 = 'AB'.repeat(32);
    expect(parseConfig(stringify(file), 'w.yaml').revisions[0].engine).toMatchObject({ modelSha256: 'ab'.repeat(32) });
  });
});

type Case = [name: string, mutate: (f: Record<string, any>) => void, expected: string];

const badCases: Case[] = [
  ['a price that is not a number', (f) => (f.revisions[0].pricing.input_per_mtok = 'abc'), 'revisions[0].pricing.input_per_mtok: expected a number >= 0, got "abc"'],
  ['a negative price', (f) => (f.revisions[1].pricing.output_per_mtok = -1), 'revisions[1].pricing.output_per_mtok: expected a number >= 0, got -1'],
  ['a missing field', (f) => delete f.revisions[0].model, 'revisions[0].model: required (a name of 1 to 128'],
  ['a fractional token count', (f) => (f.revisions[0].context_window = 512.5), 'revisions[0].context_window: expected an integer >= 1, got 512.5'],
  ['zero threads', (f) => (f.revisions[0].engine.threads = 0), 'revisions[0].engine.threads: expected an integer from 1 to 256, got 0'],
  ['an unknown engine kind', (f) => (f.revisions[0].engine.kind = 'vllm'), 'revisions[0].engine.kind: expected one of "llamacpp", "openai-compatible", "anthropic", "simulated", got "vllm"'],
  ['a missing engine kind', (f) => delete f.revisions[0].engine.kind, 'revisions[0].engine.kind: required (one of "llamacpp", "openai-compatible", "anthropic", "simulated")'],
  ['an unknown api', (f) => (f.revisions[1].engine.api = 'responses'), 'revisions[1].engine.api: expected one of "chat", "completions", got "responses"'],
  ['a bad base_url', (f) => (f.revisions[1].engine.base_url = 'localhost:8000'), 'revisions[1].engine.base_url: expected an http:// or https:// URL, got "localhost:8000"'],
  ['a secret in the file', (f) => (f.revisions[1].engine.api_key = 'sk-123'), 'revisions[1].engine.api_key: unknown key: never put a secret in the config file'],
  ['a bad api_key_env', (f) => (f.revisions[1].engine.api_key_env = 'sk-123'), 'revisions[1].engine.api_key_env: expected an environment variable name'],
  ['a bad sha256', (f) => (f.revisions[0].engine.model_sha256 = 'xyz'), 'revisions[0].engine.model_sha256: expected a sha256 digest (64 hex characters), got "xyz"'],
  ['a typo in a key', (f) => ((f.revisions[0].context_windw = 1), delete f.revisions[0].context_window), 'revisions[0].context_windw: unknown key (did you mean "context_window"?)'],
  ['a camelCase key', (f) => (f.revisions[0].pricing.inputPerMtok = 1), 'revisions[0].pricing.inputPerMtok: unknown key (did you mean "input_per_mtok"? keys are snake_case)'],
  ['an unknown top-level key', (f) => (f.revison = []), 'revison: unknown key (did you mean "revisions"?)'],
  ['a list where a mapping goes', (f) => (f.revisions[0].pricing = [1]), 'revisions[0].pricing: expected a mapping, got a list'],
  ['a mapping where a list goes', (f) => (f.tenants = {}), 'tenants: expected a list of tenants, got a mapping'],
  ['no revisions', (f) => (f.revisions = []), 'revisions: expected at least one revision'],
  ['cancel_grace_ms above 1000', (f) => (f.defaults = { cancel_grace_ms: 1001 }), 'defaults.cancel_grace_ms: expected an integer from 0 to 1000, got 1001'],
  ['a bad max_body_bytes', (f) => (f.defaults = { max_body_bytes: '1MiB' }), 'defaults.max_body_bytes: expected an integer >= 1, got "1MiB"'],
  ['a max_body_depth above 1000', (f) => (f.defaults = { max_body_depth: 5000 }), 'defaults.max_body_depth: expected an integer from 1 to 1000, got 5000'],
  ['zero max_concurrent', (f) => (f.tenants[0].limits = { max_concurrent: 0 }), 'tenants[0].limits.max_concurrent: expected an integer >= 1, got 0'],
  ['a bad id', (f) => (f.tenants[0].id = 'has space'), 'tenants[0].id: expected a name of 1 to 128'],
  ['a negative weight', (f) => (f.aliases[1].targets[0].weight = -1), 'aliases[1].targets[0].weight: expected a number from 0 to 1000000, got -1'],
  ['a weight of 1e308', (f) => (f.aliases[1].targets[1].weight = 1e308), 'aliases[1].targets[1].weight: expected a number from 0 to 1000000, got 1e+308'],
  ['a weight just above the bound', (f) => (f.aliases[1].targets[0].weight = 1_000_000.5), 'aliases[1].targets[0].weight: expected a number from 0 to 1000000, got 1000000.5'],
  // Cross-checks.
  ['a duplicate revision id', (f) => (f.revisions[1].id = 'tiny@1'), 'revisions[1].id: duplicate revision id (also revisions[0].id)'],
  ['a duplicate alias name', (f) => (f.aliases[1].name = 'tiny'), 'aliases[1].name: duplicate alias name (also aliases[0].name)'],
  ['a duplicate tenant id', (f) => f.tenants.push({ id: 't1', name: 'again' }), 'tenants[1].id: duplicate tenant id (also tenants[0].id)'],
  ['a duplicate app id', (f) => f.tenants.push({ id: 't2', name: 'two', apps: [{ id: 'app1', name: 'x' }] }), 'tenants[1].apps[0].id: duplicate app id (also tenants[0].apps[0].id)'],
  ['an alias to an unknown revision', (f) => (f.aliases[0].revision = 'nope@1'), 'aliases[0].revision: unknown revision "nope@1" (known: "tiny@1", "gpt@1")'],
  ['an alias target to an unknown revision', (f) => (f.aliases[1].targets[1].revision = 'nope@1'), 'aliases[1].targets[1].revision: unknown revision "nope@1"'],
  ['a revision twice in an alias', (f) => (f.aliases[1].targets[1].revision = 'tiny@1'), 'aliases[1].targets[1].revision: revision "tiny@1" is listed twice'],
  ['zero total weight', (f) => f.aliases[1].targets.forEach((t: any) => (t.weight = 0)), 'aliases[1].targets: the weights must add up to more than 0'],
  ['both targets and revision', (f) => (f.aliases[0].targets = [{ revision: 'tiny@1', weight: 1 }]), 'aliases[0]: set either targets or revision'],
  ['neither targets nor revision', (f) => delete f.aliases[0].revision, 'aliases[0]: set targets ([{revision, weight}]) or revision'],
  ['an unknown allowed alias', (f) => (f.tenants[0].allowed_aliases = ['tiny', 'huge']), 'tenants[0].allowed_aliases[1]: unknown alias "huge"'],
  ['default above max output', (f) => (f.revisions[0].default_output_tokens = 300), 'revisions[0].default_output_tokens: must be <= max_output_tokens (300 > 256)'],
  ['max output not below the window', (f) => (f.revisions[0].max_output_tokens = 512), 'revisions[0].max_output_tokens: must be < context_window (512 >= 512)'],
  ['a model_url without a sha256', (f) => (f.revisions[0].engine.model_url = 'https://example.com/m.gguf'), 'revisions[0].engine.model_sha256: required when model_url is set'],
  ['a context_size below the window', (f) => (f.revisions[0].engine.context_size = 256), 'revisions[0].engine.context_size: must be >= context_window (256 < 512)'],
];

describe('a llamacpp revision that names no model file', () => {
  it('parses: WEIR_MODEL_PATH stands in for the file, and resolving it says what to set when nothing does', async () => {
    const file = validFile();
    delete (file.revisions[0].engine as { model_path?: string }).model_path;
    const cfg = parseConfig(JSON.stringify(file), 'w.json');
    const engine = cfg.revisions[0].engine;
    expect(engine).toMatchObject({ kind: 'llamacpp' });
    expect(engine.kind === 'llamacpp' ? engine.modelPath : 'set').toBeUndefined();
    const unresolved = await resolveModelFile(engine as never, { cacheDir: '/nonexistent-weir-cache', allowDownload: false });
    expect(unresolved).toMatchObject({ ok: false, reason: expect.stringContaining('set WEIR_MODEL_PATH') });
  });
});

describe('parseConfig: each bad field is reported with its path', () => {
  it.each(badCases)('%s', (_name, mutate, expected) => {
    const file = validFile();
    mutate(file);
    for (const [text, source] of [
      [stringify(file), 'weir.yaml'],
      [JSON.stringify(file), 'weir.json'],
    ] as const) {
      const err = errorOf(() => parseConfig(text, source));
      expect(err.message).toContain(`${source}: ${expected}`);
    }
  });

  it('refuses an infinite alias weight (YAML .inf) and accepts weights up to the bound of 1,000,000', () => {
    const file = validFile();
    file.aliases[1].targets[0].weight = Number.POSITIVE_INFINITY;
    const text = stringify(file);
    expect(text).toContain('.inf');
    expect(errorOf(() => parseConfig(text, 'weir.yaml')).message).toContain('weir.yaml: aliases[1].targets[0].weight: expected a number from 0 to 1000000, got Infinity');
    file.aliases[1].targets[0].weight = 1_000_000;
    file.aliases[1].targets[1].weight = 0.5;
    expect(parseConfig(stringify(file), 'weir.yaml').aliases[1].targets.map((t) => t.weight)).toEqual([1_000_000, 0.5]);
  });

  it('gives exactly the documented message for a bad price', () => {
    const file = validFile();
    file.revisions[0].pricing.input_per_mtok = 'abc';
    expect(errorOf(() => parseConfig(stringify(file), 'weir.yaml')).message).toBe(
      'weir.yaml: revisions[0].pricing.input_per_mtok: expected a number >= 0, got "abc"',
    );
  });

  it('lists every problem, one per line', () => {
    const file = validFile();
    file.revisions[0].pricing.input_per_mtok = 'abc';
    file.revisions[1].engine.kind = 'vllm';
    file.tenants[0].typo = true;
    const err = errorOf(() => parseConfig(stringify(file), 'weir.yaml'));
    expect(err.problems.map((p) => p.path)).toEqual(['revisions[0].pricing.input_per_mtok', 'revisions[1].engine.kind', 'tenants[0].typo']);
    expect(err.message.split('\n')).toHaveLength(3);
  });

  it.each([
    ['broken YAML', 'revisions: [\n  {id: x', 'weir.yaml', /^weir\.yaml: line \d+, column \d+: invalid YAML: /],
    ['a duplicate YAML key', 'revisions: []\nrevisions: []\n', 'weir.yaml', /invalid YAML: Map keys must be unique/],
    ['broken JSON', '{"revisions": [', 'weir.json', /^weir\.json: invalid JSON: /],
    ['an empty file', '', 'weir.yaml', /^weir\.yaml: expected a mapping, got null$/],
    ['a scalar document', 'hello', 'weir.yaml', /^weir\.yaml: expected a mapping, got "hello"$/],
  ])('reports %s', (_name, text, source, pattern) => {
    expect(errorOf(() => parseConfig(text, source)).message).toMatch(pattern);
  });

  it('reports an unreadable file with a fix', () => {
    expect(errorOf(() => loadConfigFile('/nonexistent/weir.yaml')).message).toBe(
      '/nonexistent/weir.yaml: cannot read the config file (ENOENT); check the path in WEIR_CONFIG, or unset it to use the built-in default',
    );
  });
});

describe('defaultConfig and config/weir.example.yaml', () => {
  const examplePath = path.resolve(__dirname, '../../../config/weir.example.yaml');

  it('the example file parses to exactly defaultConfig()', () => {
    expect(loadConfigFile(examplePath)).toEqual(defaultConfig());
  });

  it('round-trips through parseConfig and takes a model path', () => {
    const cfg = defaultConfig({ modelPath: '/m/stories260K.gguf' });
    expect(cfg.revisions[0].engine).toMatchObject({ kind: 'llamacpp', modelPath: '/m/stories260K.gguf' });
    expect(cfg.aliases[0]).toMatchObject({ name: 'tiny-stories', targets: [{ revision: 'stories260k@1', weight: 1 }] });
    expect(cfg.tenants[0]).toMatchObject({ id: 'demo', apps: [{ id: 'demo-app' }], allowedAliases: ['*'] });
    expect(defaultConfig()).not.toBe(defaultConfig());
  });
});
