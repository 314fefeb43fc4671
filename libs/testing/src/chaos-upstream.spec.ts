import { type ChaosRecorderWriter, type ChaosSchedule, type ChaosUpstream, CHAOS_WORDS, chaosPrompt, chaosPromptTokens, createChaosRecorder, startChaosUpstream } from './chaos-upstream';

interface Received {
  status: number;
  datas: string[];
  /** The stream ended with [DONE]. */
  done: boolean;
}

/** Posts a chat stream and reads its `data:` payloads; `onData` may abort after each. */
async function chat(server: ChaosUpstream, id: string, prompt: string, extra: Record<string, unknown> = {}, onData?: (datas: string[], abort: () => void) => void): Promise<Received> {
  const controller = new AbortController();
  const res = await fetch(`${server.url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({ model: 'chaos', messages: [{ role: 'user', content: prompt }], stream: true, stream_options: { include_usage: true, continuous_usage_stats: true }, ...extra }),
    signal: controller.signal,
  });
  const datas: string[] = [];
  if (res.status !== 200) {
    await res.text();
    return { status: res.status, datas, done: false };
  }
  let buffer = '';
  const decoder = new TextDecoder();
  try {
    for await (const part of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(part, { stream: true });
      let cut: number;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (event.startsWith('data: ')) datas.push(event.slice(6));
        onData?.(datas, () => controller.abort());
      }
    }
  } catch {
    // aborted by onData, or the server destroyed the socket
  }
  return { status: res.status, datas, done: datas.at(-1) === '[DONE]' };
}

const contentOf = (datas: string[]) =>
  datas
    .filter((d) => d !== '[DONE]')
    .map((d) => JSON.parse(d) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }>; usage?: { completion_tokens: number; prompt_tokens: number } })
    .filter((c) => c.choices[0]?.delta.content);

describe('the chaos upstream', () => {
  let recorder: ChaosRecorderWriter;
  let engine: ChaosUpstream;
  let plain: ChaosUpstream;
  const plans = new Map<string, ChaosSchedule>();

  beforeAll(async () => {
    recorder = createChaosRecorder();
    engine = await startChaosUpstream({ flavour: 'weir-engine', replicaId: 'engine/0', recorder, plan: (id) => plans.get(id) });
    plain = await startChaosUpstream({ flavour: 'no-usage', replicaId: 'plain/0', recorder, plan: (id) => plans.get(id) });
  });
  afterAll(async () => {
    await engine.close();
    await plain.close();
  });

  it('streams the planned tokens with the running usage on every chunk, then the final usage, and records them', async () => {
    plans.set('p1', { tokens: 5, tokenDelayMs: 1 });
    const prompt = chaosPrompt('p1', 4);
    const r = await chat(engine, 'gen-1', prompt);
    expect(r.done).toBe(true);
    const content = contentOf(r.datas);
    expect(content.map((c) => c.choices[0].delta.content)).toEqual(CHAOS_WORDS.slice(0, 5));
    expect(content.map((c) => c.usage?.completion_tokens)).toEqual([1, 2, 3, 4, 5]);
    const expectedPrompt = chaosPromptTokens([{ role: 'user', content: prompt }]);
    expect(JSON.parse(r.datas.at(-2) as string).usage).toEqual({ prompt_tokens: expectedPrompt, completion_tokens: 5, total_tokens: expectedPrompt + 5 });
    expect(recorder.generations.get('gen-1')?.attempts).toEqual([
      expect.objectContaining({ attempt: 1, planId: 'p1', replicaId: 'engine/0', ending: 'finished', produced: 5, promptTokens: expectedPrompt, usageReported: 'continuous' }),
    ]);
    const tokenize = await (await fetch(`${engine.origin}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: prompt }) })).json();
    expect(tokenize).toEqual({ input_tokens: expectedPrompt });
  });

  it('caps the output at max tokens and says length', async () => {
    plans.set('p2', { tokens: 9 });
    const r = await chat(engine, 'gen-2', chaosPrompt('p2', 1), { max_completion_tokens: 3 });
    expect(contentOf(r.datas)).toHaveLength(3);
    const finish = r.datas.map((d) => (d === '[DONE]' ? undefined : (JSON.parse(d) as { choices: Array<{ finish_reason: string | null }> }).choices[0]?.finish_reason)).find((f) => f);
    expect(finish).toBe('length');
    expect(recorder.produced('gen-2')).toBe(3);
  });

  it('dies mid-stream after k tokens: the caller gets all k, then the connection drops; its own usage says so', async () => {
    plans.set('p3', { tokens: 10, dieAfterTokens: 4, tokenDelayMs: 2 });
    const r = await chat(engine, 'gen-3', chaosPrompt('p3', 2));
    expect(r.done).toBe(false);
    expect(contentOf(r.datas).map((c) => c.usage?.completion_tokens)).toEqual([1, 2, 3, 4]);
    expect(recorder.generations.get('gen-3')?.attempts[0]).toMatchObject({ ending: 'died', produced: 4 });
    const usage = await (await fetch(`${engine.url}/generations/gen-3/usage`)).json();
    expect(usage).toMatchObject({ completion_tokens: 4, finished: true, finish_reason: 'error' });
  });

  it('refuses the first attempts with a 503 before any output, then serves the same generation', async () => {
    plans.set('p4', { tokens: 2, failAttempts: 1 });
    const first = await chat(engine, 'gen-4', chaosPrompt('p4', 0));
    const second = await chat(engine, 'gen-4', chaosPrompt('p4', 0));
    expect([first.status, second.status]).toEqual([503, 200]);
    expect(recorder.generations.get('gen-4')?.attempts.map((a) => [a.attempt, a.ending, a.produced])).toEqual([
      [1, 'refused', 0],
      [2, 'finished', 2],
    ]);
  });

  it('stops on POST /v1/stop/{id} and ends the stream normally with the final usage', async () => {
    plans.set('p5', { tokens: 1000, tokenDelayMs: 5 });
    const r = await chat(engine, 'gen-5', chaosPrompt('p5', 0), {}, (datas) => {
      if (datas.length === 4) void fetch(`${engine.url}/stop/gen-5`, { method: 'POST' });
    });
    expect(r.done).toBe(true);
    const final = JSON.parse(r.datas.at(-2) as string) as { usage: { completion_tokens: number } };
    const attempt = recorder.generations.get('gen-5')?.attempts[0];
    expect(attempt).toMatchObject({ ending: 'stopped' });
    expect(final.usage.completion_tokens).toBe(attempt?.produced);
    expect(contentOf(r.datas)).toHaveLength(attempt?.produced as number);
    expect(attempt?.produced).toBeLessThan(1000);
  });

  it('records a caller that closes the connection, with every token it wrote', async () => {
    plans.set('p6', { tokens: 1000, tokenDelayMs: 5 });
    const r = await chat(engine, 'gen-6', chaosPrompt('p6', 0), {}, (datas, abort) => datas.length === 3 && abort());
    await recorder.idle(2_000);
    const attempt = recorder.generations.get('gen-6')?.attempts[0];
    expect(attempt?.ending).toBe('client_closed');
    expect(attempt?.produced).toBeGreaterThanOrEqual(contentOf(r.datas).length);
    expect(attempt?.produced).toBeLessThan(1000);
  });

  it('the no-usage flavour never reports usage and has none of the engine extensions', async () => {
    plans.set('p7', { tokens: 3 });
    const r = await chat(plain, 'gen-7', chaosPrompt('p7', 0));
    expect(r.done).toBe(true);
    expect(r.datas.filter((d) => d.includes('"usage"'))).toEqual([]);
    expect(recorder.generations.get('gen-7')?.attempts[0]).toMatchObject({ ending: 'finished', produced: 3, usageReported: 'none' });
    expect((await fetch(`${plain.origin}/tokenize`, { method: 'POST', body: '{"input":"x"}' })).status).toBe(404);
    expect((await fetch(`${plain.url}/generations/gen-7/usage`)).status).toBe(404);
  });

  it.each(['cl100k_base', 'o200k_base'])('its words are one %s token each, also concatenated', async (name) => {
    const { Tiktoken } = await import('js-tiktoken/lite');
    const ranks = name === 'o200k_base' ? (await import('js-tiktoken/ranks/o200k_base')).default : (await import('js-tiktoken/ranks/cl100k_base')).default;
    const enc = new Tiktoken(ranks);
    for (const w of CHAOS_WORDS) expect([w, enc.encode(w).length]).toEqual([w, 1]);
    for (const n of [1, 7, 40, 100]) {
      const text = Array.from({ length: n }, (_, i) => CHAOS_WORDS[i % CHAOS_WORDS.length]).join('');
      expect(enc.encode(text)).toHaveLength(n);
    }
  });
});
