import { UsageError } from '../args';
import { ADMIN_COMMANDS, commandHelp, isAdminCommandLine, parseAdminCommandLine, resourceHelp, usageLine } from './parse';

const env = { WEIR_ADMIN_TOKEN: 'wa_env_token', WEIR_ADMIN_URL: 'http://cp.internal:9000' };

/** The parsed command, or the usage error's message. */
function parse(argv: string[], e: Record<string, string | undefined> = env) {
  try {
    return parseAdminCommandLine(argv, e);
  } catch (error) {
    if (error instanceof UsageError) return { usage: error.message };
    throw error;
  }
}

describe('parseAdminCommandLine', () => {
  it.each([
    [['tenants', 'list'], 'tenants', 'list', {}, {}],
    [['tenants', 'get', 'acme'], 'tenants', 'get', { tenant: 'acme' }, {}],
    [['tenants', 'create', 'acme', '--name', 'Acme'], 'tenants', 'create', { tenant: 'acme' }, { name: 'Acme' }],
    [['tenants', 'kill-switch', 'acme', 'on'], 'tenants', 'kill-switch', { tenant: 'acme', state: 'on' }, {}],
    [['keys', 'revoke', 'acme', 'web', 'key_1'], 'keys', 'revoke', { tenant: 'acme', app: 'web', key: 'key_1' }, {}],
    [['keys', 'list', 'acme', '--app', 'web'], 'keys', 'list', { tenant: 'acme' }, { app: 'web' }],
    [['aliases', 'set-weights', 'chat', '--weights', 'a=90,b=10'], 'aliases', 'set-weights', { alias: 'chat' }, { weights: 'a=90,b=10' }],
    [['models', 'deprecate', 'r1', '--retires-on', '2031-01-31', '--replacement', 'r2'], 'models', 'deprecate', { revision: 'r1' }, { 'retires-on': '2031-01-31', replacement: 'r2' }],
    [['capacity', 'show'], 'capacity', 'show', { pool: undefined }, {}],
    [['capacity', 'show', 'gpu/a100'], 'capacity', 'show', { pool: 'gpu/a100' }, {}],
    [['audit', 'list', '--entity-type', 'alias', '--since', '2030-01-01T00:00:00Z'], 'audit', 'list', {}, { 'entity-type': 'alias', since: '2030-01-01T00:00:00Z' }],
  ])('%j', (argv, resource, verb, args, flags) => {
    const r = parse(argv);
    if (!('kind' in r) || r.kind !== 'run') throw new Error(`expected a command, got ${JSON.stringify(r)}`);
    expect([r.spec.resource, r.spec.verb]).toEqual([resource, verb]);
    expect(r.args).toEqual(args);
    // Flags not given are present as undefined; only the given ones matter here.
    expect(Object.fromEntries(Object.entries(r.flags).filter(([, v]) => v !== undefined))).toEqual(flags);
    expect(r).toMatchObject({ json: false, baseUrl: 'http://cp.internal:9000/admin/v1', credential: 'wa_env_token' });
  });

  it.each([
    [['tenants', 'list', '--url', 'http://x:1/', '--token', 'wa_flag'], env, 'http://x:1/admin/v1', 'wa_flag'],
    [['tenants', 'list', '--url', 'https://cp.example/admin/v1/'], env, 'https://cp.example/admin/v1', 'wa_env_token'],
    [['tenants', 'list'], { WEIR_ADMIN_TOKEN: 'wa_t' }, 'http://127.0.0.1:8090/admin/v1', 'wa_t'],
    [['tenants', 'list'], { WEIR_ADMIN_TOKEN: 'wa_t', WEIR_ADMIN_URL: '' }, 'http://127.0.0.1:8090/admin/v1', 'wa_t'],
    [['usage'], { WEIR_API_KEY: 'wk_k' }, 'http://127.0.0.1:8080', 'wk_k'],
    [['usage', '--api-url', 'http://gw:8080/v1', '--api-key', 'wk_flag', '--window', 'day'], { WEIR_API_KEY: 'wk_k' }, 'http://gw:8080', 'wk_flag'],
  ])('connects from flags, else the environment, else the default (%j)', (argv, e, baseUrl, credential) => {
    expect(parse(argv, e)).toMatchObject({ kind: 'run', baseUrl, credential });
  });

  it('takes --json anywhere after the verb', () => {
    expect(parse(['tenants', '--json', 'list'])).toEqual({ usage: '--json: name the command first, as in weir tenants list --json (weir tenants --help lists the commands)' });
    expect(parse(['tenants', 'list', '--json'])).toMatchObject({ kind: 'run', json: true });
    expect(parse(['apps', 'list', '--json', 'acme'])).toMatchObject({ kind: 'run', json: true, args: { tenant: 'acme' } });
  });

  it.each([
    [['widgets', 'list'], 'widgets: unknown command (weir --help lists them)'],
    [['tenants', 'frob'], 'tenants frob: unknown command (weir tenants --help lists them)'],
    [['tenants', 'get'], 'tenants get: missing <tenant> (usage: weir tenants get <tenant> [--json])'],
    [['keys', 'create', 'acme'], 'keys create: missing <app> (usage: weir keys create <tenant> <app> [--label TEXT] [--json])'],
    [['tenants', 'get', 'a', 'b'], 'b: unexpected argument (usage: weir tenants get <tenant> [--json])'],
    [['tenants', 'create', 'acme'], 'tenants create: --name NAME is required (usage: weir tenants create <tenant> --name NAME [--policy-file FILE] [--json])'],
    [['revisions', 'create'], 'revisions create: --file FILE is required (usage: weir revisions create --file FILE [--json])'],
    [['tenants', 'list', '--bogus'], '--bogus: unknown flag for tenants list (weir tenants list --help lists them)'],
    [['tenants', 'create', 'a', '--name'], '--name: needs a value'],
    [['tenants', 'list', '--json=yes'], '--json: takes no value'],
    [['tenants', 'create', 'a', '--name', 'x', '--name', 'y'], '--name: given more than once'],
    [['tenants', 'list', '--url', 'cp:8090'], '--url (or WEIR_ADMIN_URL): expected an http(s) URL such as http://127.0.0.1:8090, got "cp:8090"'],
    [['usage', '--api-url', 'ftp://x'], '--api-url (or WEIR_API_URL): expected an http(s) URL such as http://127.0.0.1:8080, got "ftp://x"'],
    [['usage', '--url', 'http://x'], '--url: unknown flag for usage (weir usage --help lists them)'],
  ])('%j is a usage error', (argv, message) => {
    expect(parse(argv, { ...env, WEIR_API_KEY: 'wk_k' })).toEqual({ usage: message });
  });

  it('asks for a credential that is neither a flag nor in the environment', () => {
    expect(parse(['tenants', 'list'], {})).toEqual({ usage: 'no admin token: set WEIR_ADMIN_TOKEN (or pass --token); an admin creates tokens with weir admin-tokens create' });
    expect(parse(['usage'], env)).toEqual({ usage: "no API key: set WEIR_API_KEY to the tenant's key (or pass --api-key); usage is always the key's own tenant's" });
  });

  it('answers help without a credential: 0 when asked for, 2 when the verb is missing', () => {
    expect(parse(['tenants', '--help'], {})).toEqual({ kind: 'help', text: resourceHelp('tenants'), status: 0 });
    expect(parse(['tenants'], {})).toEqual({ kind: 'help', text: resourceHelp('tenants'), status: 2 });
    const spec = ADMIN_COMMANDS.find((c) => c.resource === 'keys' && c.verb === 'create');
    expect(parse(['keys', 'create', '-h'], {})).toEqual({ kind: 'help', text: commandHelp(spec as NonNullable<typeof spec>), status: 0 });
    expect(parse(['usage', '--help'], {})).toMatchObject({ kind: 'help', status: 0 });
  });
});

describe('help', () => {
  it('lists every command of a resource with its arguments', () => {
    const text = resourceHelp('aliases');
    for (const verb of ['list', 'get <alias>', 'create <alias>', 'set-weights <alias>', 'rollback <alias>']) expect(text).toContain(`weir aliases ${verb}`);
  });

  it('documents every flag of a command, the connection flags and the exit statuses', () => {
    for (const spec of ADMIN_COMMANDS) {
      const text = commandHelp(spec);
      for (const flag of Object.keys(spec.flags ?? {})) expect(text).toContain(`--${flag}`);
      expect(text).toContain(spec.target === 'data' ? '--api-key KEY' : '--token TOKEN');
      expect(text).toContain(`usage: ${usageLine(spec)}`);
      expect(text).toContain('exit status: 0 done, 1 the API refused');
    }
  });

  it('names one command per resource and verb', () => {
    const names = ADMIN_COMMANDS.map((c) => `${c.resource} ${c.verb}`);
    expect(new Set(names).size).toBe(names.length);
  });
});

describe('isAdminCommandLine', () => {
  it.each([
    [['tenants', 'list'], true],
    [['usage'], true],
    [['capacity', 'show'], true],
    [['capacity', '--rps', '1'], false],
    [['capacity'], false],
    [['--help'], false],
    [[], false],
    [['plan'], false],
  ])('%j → %s', (argv, expected) => {
    expect(isAdminCommandLine(argv)).toBe(expected);
  });
});
