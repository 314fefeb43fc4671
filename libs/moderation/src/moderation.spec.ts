import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { checkWholeOutput, compileModerationPolicies, moderationPolicyProblems, runCheck } from './policies';
import { logEngineFailures } from './types';
import { createOpenAiModerationEngine } from './openai-engine';
import { createRulesEngine, rulesProblems } from './rules-engine';
import { createOutputWindow, cutAt, windowsOf } from './window';

const signal = () => new AbortController().signal;

describe('rules engine (RE2)', () => {
  const engine = createRulesEngine('rules', [
    { lists: [{ category: 'violence', phrases: ['red dragon', 'kill'] }], patterns: [{ category: 'custom', pattern: '(?i)secret-\\d{4}' }] },
  ]);

  it('matches phrases case-insensitively on word boundaries, across any whitespace, and patterns', async () => {
    const r = await engine.check(['A RED\n  dragon!', 'skill and killer', 'kill.', 'my Secret-1234', 'clean'], signal());
    expect(r.map((x) => x.flagged)).toEqual([true, false, true, true, false]);
    expect(r[0]).toMatchObject({ categories: { violence: true, custom: false }, category_scores: { violence: 1 }, reason: 'list:violence' });
    expect(r[3].reason).toBe('pattern:custom#0');
    expect(r[4].reason).toBeUndefined();
  });

  it('matches across Unicode spaces and zero-width characters, lists and patterns alike', async () => {
    const texts = ['red\u00a0dragon', 'red\u2003dragon', 'red\u200bdragon', 'red\u3000dragon', 'RED\u2028DRAGON', 'dra\u00adgon red', 'red dra\u200bgon', 'red\u200d dragon', '\uff52\uff45\uff44 dragon', 'reddragon', 'red dragonfly'];
    expect((await engine.check(texts, signal())).map((x) => x.flagged)).toEqual([true, true, true, true, true, false, true, true, true, false, false]);
    // A pattern sees the same normalised text.
    expect((await engine.check(['my secret\u200b-1234', 'my ｓｅｃｒｅｔ-１２３４'], signal())).map((x) => x.flagged)).toEqual([true, true]);
    // A phrase written with Unicode spaces or format characters is normalised too; one of only format characters is blank.
    const nb = createRulesEngine('rules', [{ lists: [{ category: 'violence', phrases: ['blue\u00a0whale'] }] }]);
    expect((await nb.check(['a blue  whale'], signal()))[0].flagged).toBe(true);
    expect(rulesProblems({ lists: [{ category: 'hate', phrases: ['\u200b\u00ad'] }] })).toEqual(['rules.lists[0].phrases[0]: a phrase must not be blank']);
  });

  it('refuses patterns that match the empty string, naming the field', () => {
    for (const pattern of ['a*', 'x?', '^', '\\b', '(?m)$', 'a|', '\\B']) {
      expect(rulesProblems({ patterns: [{ category: 'custom', pattern }] })).toEqual([
        "rules.patterns[0].pattern: matches the empty string, so it would flag every text; it must match at least one character (e.g. 'a+' rather than 'a*', no bare anchors)",
      ]);
    }
    expect(rulesProblems({ patterns: [{ category: 'custom', pattern: 'a+' }, { category: 'custom', pattern: '\\bkill\\b' }] })).toEqual([]);
    expect(rulesProblems({ patterns: [{ category: 'custom', pattern: 'a{1000}b{1000}c{1000}d{1000}e{1000}' }] })[0]).toMatch(/rules\.patterns\[0\]\.pattern: too complex \(\d+ RE2 instructions, at most 4000\)/);
  });

  it('runs a catastrophic-backtracking pattern in linear time', async () => {
    const evil = createRulesEngine('rules', [{ patterns: [{ category: 'custom', pattern: '(a+)+$' }] }]);
    const text = `${'a'.repeat(50_000)}!`;
    const t0 = performance.now();
    expect((await evil.check([text], signal()))[0].flagged).toBe(false);
    expect(performance.now() - t0).toBeLessThan(5_000);
  });

  it('names RE2 compile errors and bad categories', () => {
    const problems = rulesProblems({ patterns: [{ category: 'custom', pattern: '(?=x)y' }, { category: 'Bad Cat', pattern: 'x' }], lists: [{ category: 'hate', phrases: ['  '] }] });
    expect(problems.join('\n')).toMatch(/rules\.patterns\[0\]\.pattern: does not compile with RE2/);
    expect(problems.join('\n')).toMatch(/rules\.patterns\[1\]\.category/);
    expect(problems.join('\n')).toMatch(/rules\.lists\[0\]\.phrases\[0\]: a phrase must not be blank/);
    expect(() => createRulesEngine('r', [{ patterns: [{ category: 'custom', pattern: '(a' }] }])).toThrow(/does not compile/);
  });
});

describe('output window', () => {
  it('is due after window − overlap new characters and carries the overlap into the next check', () => {
    const w = createOutputWindow<string>({ windowChars: 10, overlapChars: 4 });
    w.push('a', 'abc');
    expect(w.due()).toBe(false);
    w.push('b', 'def');
    expect(w.due()).toBe(true);
    expect(w.text()).toBe('abcdef');
    expect(w.release()).toEqual(['a', 'b']);
    w.push('c', 'gh');
    expect(w.text()).toBe('cdefgh');
    expect(w.heldChars()).toBe(2);
    expect(() => createOutputWindow({ windowChars: 4, overlapChars: 4 })).toThrow(RangeError);
  });

  it('never releases a phrase no longer than overlap + 1, whatever the delta and window splits (10,000 trials)', async () => {
    const phrase = 'red dragon';
    const engine = createRulesEngine('rules', [{ lists: [{ category: 'violence', phrases: [phrase] }] }]);
    let seed = 7;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let trial = 0; trial < 10_000; trial++) {
      const text = `${'lorem ipsum '.repeat(rnd(6))}${'x'.repeat(rnd(3))} ${phrase} and more words after it`;
      const overlap = phrase.length - 1 + rnd(4);
      const w = createOutputWindow<string>({ windowChars: overlap + 1 + rnd(12), overlapChars: overlap });
      let released = '';
      let cut = false;
      for (let i = 0; i < text.length && !cut; ) {
        const d = text.slice(i, i + 1 + rnd(5));
        i += d.length;
        w.push(d, d);
        if (w.due()) {
          if ((await engine.check([w.text()], signal()))[0].flagged) cut = true;
          else released += w.release().join('');
        }
      }
      if (!cut && w.holding()) {
        if ((await engine.check([w.text()], signal()))[0].flagged) cut = true;
        else released += w.release().join('');
      }
      expect(cut).toBe(true);
      expect(released.toLowerCase().includes(phrase)).toBe(false);
    }
  });
});

describe('whole-text windows (a cached answer)', () => {
  it('cuts a text into overlapping windows the relay would check', () => {
    expect(windowsOf('', 10, 4)).toEqual([]);
    expect(windowsOf('abcdefgh', 10, 4)).toEqual(['abcdefgh']);
    expect(windowsOf('abcdefghijklmnop', 10, 4)).toEqual(['abcdefghij', 'ghijklmnop']);
    expect(windowsOf('abcdefghijklmnopq', 10, 4)).toEqual(['abcdefghij', 'ghijklmnop', 'mnopq']);
    expect(() => windowsOf('x', 4, 4)).toThrow(RangeError);
    expect(cutAt('abc', 5)).toBe(3);
    expect(cutAt('ab\ud83d\ude00c', 3)).toBe(2);
    expect(cutAt('\ud83d\ude00c', 1)).toBe(2);
  });

  it('flags a phrase split across window boundaries (10,000 positions)', async () => {
    const engine = createRulesEngine('rules', [{ lists: [{ category: 'violence', phrases: ['red dragon'] }] }]);
    const plan = { engine, fail: 'closed' as const, timeoutMs: 1_000, windowChars: 16, overlapChars: 9 };
    for (let pad = 0; pad < 200; pad++) {
      const text = `${'x'.repeat(pad)} red dragon ${'y'.repeat(pad % 37)}`;
      expect((await checkWholeOutput(plan, text, signal())).blocked).toBe(true);
      expect((await checkWholeOutput(plan, text.replace('dragon', 'wagon'), signal())).blocked).toBe(false);
    }
    expect(await checkWholeOutput(plan, '', signal())).toEqual({ blocked: false, reason: 'pass', categories: [] });
  });
});

describe('OpenAI-compatible moderation upstream', () => {
  let server: Server;
  let url: string;
  const seen: { auth?: string; body: unknown }[] = [];
  let reply: (body: { input: string[] }) => { status: number; body: unknown; delayMs?: number } = () => ({ status: 200, body: {} });
  beforeAll(async () => {
    server = createServer((req, res) => {
      let raw = '';
      req.on('data', (c) => (raw += c));
      req.on('end', () => {
        const body = JSON.parse(raw);
        seen.push({ auth: req.headers.authorization, body });
        const r = reply(body);
        setTimeout(() => {
          res.writeHead(r.status, { 'content-type': 'application/json' });
          res.end(JSON.stringify(r.body));
        }, r.delayMs ?? 0);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('sends the texts with the key and maps the results', async () => {
    reply = (b) => ({ status: 200, body: { id: 'modr-1', model: 'm', results: b.input.map((t) => ({ flagged: t.includes('bad'), categories: { hate: t.includes('bad'), violence: false }, category_scores: { hate: t.includes('bad') ? 0.9 : 0.01, violence: 0 } })) } });
    const engine = createOpenAiModerationEngine({ name: 'oa', baseUrl: `${url}/`, apiKey: 'sk-test', model: 'omni-moderation-latest' });
    const r = await engine.check(['a bad thing', 'fine'], signal());
    expect(seen.at(-1)).toEqual({ auth: 'Bearer sk-test', body: { model: 'omni-moderation-latest', input: ['a bad thing', 'fine'] } });
    expect(r).toEqual([
      { flagged: true, categories: { hate: true, violence: false }, category_scores: { hate: 0.9, violence: 0 }, reason: 'upstream:hate' },
      { flagged: false, categories: { hate: false, violence: false }, category_scores: { hate: 0.01, violence: 0 } },
    ]);
  });

  it('fails on an HTTP error, a wrong result count and a timeout, naming the engine and never the texts', async () => {
    const engine = createOpenAiModerationEngine({ name: 'oa', baseUrl: url, timeoutMs: 100 });
    reply = () => ({ status: 500, body: { error: 'x' } });
    await expect(engine.check(['secret text'], signal())).rejects.toThrow(/'oa'.*HTTP 500/);
    reply = () => ({ status: 200, body: { results: [] } });
    await expect(engine.check(['secret text'], signal())).rejects.toThrow(/0 results for 1 inputs/);
    reply = () => ({ status: 200, body: { results: [] }, delayMs: 400 });
    const err = await engine.check(['secret text'], signal()).catch((e: Error) => e);
    expect((err as Error).message).toMatch(/no answer within 100 ms/);
    expect((err as Error).message).not.toContain('secret');
  });

  it('reports an engine failure or timeout to the observer and a warn line (engine, class, status; never the text)', async () => {
    const lines: { obj: object; msg: string }[] = [];
    const observer = logEngineFailures({}, { warn: (obj, msg) => lines.push({ obj, msg }) });
    reply = () => ({ status: 502, body: { error: 'secret text' } });
    const failing = createOpenAiModerationEngine({ name: 'oa', baseUrl: url });
    expect((await runCheck('input', { engine: failing, fail: 'closed', timeoutMs: 1_000 }, ['secret text'], signal(), observer)).reason).toBe('engine_error');
    reply = () => ({ status: 200, body: { results: [{ flagged: false, categories: {} }] }, delayMs: 300 });
    expect((await runCheck('output', { engine: failing, fail: 'open', timeoutMs: 50 }, ['secret text'], signal(), observer)).reason).toBe('failed_open');
    expect(lines).toEqual([
      { obj: { stage: 'input', engine: 'oa', reason: 'engine_error', errorClass: 'Error', status: 502 }, msg: 'moderation engine failed' },
      { obj: { stage: 'output', engine: 'oa', reason: 'timeout', errorClass: expect.any(String) }, msg: 'moderation engine failed' },
    ]);
    expect(JSON.stringify(lines)).not.toContain('secret');
  });

  it('fails closed or open under a policy on a timeout', async () => {
    reply = () => ({ status: 200, body: { results: [{ flagged: false, categories: {} }] }, delayMs: 300 });
    const engine = createOpenAiModerationEngine({ name: 'oa', baseUrl: url });
    expect(await runCheck('input', { engine, fail: 'closed', timeoutMs: 50 }, ['x'], signal())).toEqual({ blocked: true, reason: 'timeout', categories: [] });
    expect(await runCheck('input', { engine, fail: 'open', timeoutMs: 50 }, ['x'], signal())).toEqual({ blocked: false, reason: 'failed_open', categories: [] });
  });
});

describe('policies', () => {
  it('compiles per tenant key, honours block_on, and reports problems by field', async () => {
    const policies = compileModerationPolicies({
      tenants: [
        { id: 't', uid: 't~0123456789abcdef', name: 'T', apps: [], allowedAliases: ['*'], defaultDeadlineMs: 1, limits: { maxConcurrent: 1 }, moderation: { input: { engine: 'rules', blockOn: ['hate'], fail: 'closed', timeoutMs: 100 }, rules: { lists: [{ category: 'violence', phrases: ['x'] }, { category: 'hate', phrases: ['y'] }] } } },
        { id: 'u', name: 'U', apps: [], allowedAliases: ['*'], defaultDeadlineMs: 1, limits: { maxConcurrent: 1 } },
      ],
    });
    expect(policies.of('t')).toBeUndefined();
    expect(policies.of('u')).toBeUndefined();
    const plan = policies.of('t~0123456789abcdef');
    expect(plan?.input).toBeDefined();
    expect((await runCheck('input', plan!.input!, ['x'], signal())).blocked).toBe(false);
    expect(await runCheck('input', plan!.input!, ['y x'], signal())).toEqual({ blocked: true, reason: 'flagged', categories: ['hate'] });
    expect(moderationPolicyProblems({ output: { engine: 'nope', windowChars: 10, overlapChars: 10, fail: 'closed', timeoutMs: 1 } }, [])).toEqual([
      "moderation.output.engine: 'nope' is not a moderation engine (declare it in moderation_engines, or use 'rules')",
      'moderation.output.overlap_chars: 10 must be below window_chars (10)',
    ]);
  });
});
