import { existsSync } from 'node:fs';
import { freePort, repoPath, tinyModelPath } from './paths';
import { chatStreamEvents, fakeModelScript, splitBytes, sseReply, startScriptedUpstream } from './scripted-upstream';

describe('scripted upstream', () => {
  it('records requests and plays SSE, JSON and error replies', async () => {
    const upstream = await startScriptedUpstream();
    try {
      const res = await fetch(`${upstream.url}/chat/completions`, { method: 'POST', body: JSON.stringify({ a: 1 }) });
      expect(res.headers.get('content-type')).toBe('text/event-stream');
      const body = await res.text();
      expect(body).toContain('"content":"Hello"');
      expect(body.endsWith('data: [DONE]\n\n')).toBe(true);
      expect(upstream.requests[0]).toMatchObject({ method: 'POST', path: '/v1/chat/completions', body: { a: 1 }, clientAborted: false });

      upstream.setScript((_req, index) => (index === 1 ? { kind: 'error', status: 429, headers: { 'retry-after': '1' } } : { kind: 'json', body: { ok: true } }));
      const limited = await fetch(`${upstream.url}/x`, { method: 'POST' });
      expect(limited.status).toBe(429);
      expect(((await limited.json()) as { error: { type: string } }).error.type).toBe('server_error');
      expect(await (await fetch(`${upstream.url}/y`)).json()).toEqual({ ok: true });
    } finally {
      await upstream.close();
    }
  });

  it('cuts the socket on a destroy step', async () => {
    const upstream = await startScriptedUpstream({ script: () => ({ kind: 'sse', steps: [{ data: 'data: {}\n\n' }, { destroy: true, delayMs: 5 }] }) });
    try {
      const res = await fetch(`${upstream.url}/chat/completions`, { method: 'POST' });
      await expect(res.text()).rejects.toThrow();
    } finally {
      await upstream.close();
    }
  });

  it('fakeModelScript honours max tokens and include_usage', async () => {
    const upstream = await startScriptedUpstream({ script: fakeModelScript() });
    try {
      const res = await fetch(`${upstream.url}/chat/completions`, {
        method: 'POST',
        body: JSON.stringify({ messages: [{ role: 'user', content: 'a b' }], max_completion_tokens: 2, stream: true }),
      });
      const body = await res.text();
      expect(body).toContain('"finish_reason":"length"');
      expect(body).not.toContain('"prompt_tokens"');
      expect(body.match(/"content":"w\d /g)).toHaveLength(2);
    } finally {
      await upstream.close();
    }
  });

  it('splitBytes cuts at byte offsets, also inside a multi-byte character', () => {
    const parts = splitBytes(['a🌍', 'b'], [2, 3]);
    expect(parts.map((p) => p.length)).toEqual([2, 1, 3]);
    expect(Buffer.concat(parts).toString('utf8')).toBe('a🌍b');
    expect(sseReply(chatStreamEvents(['x']), { delayMs: 3 })).toMatchObject({ kind: 'sse' });
  });
});

describe('paths', () => {
  it('finds the repository root and the tiny model', async () => {
    expect(existsSync(repoPath('libs', 'testing', 'package.json'))).toBe(true);
    expect(existsSync(tinyModelPath())).toBe(true);
    expect(await freePort()).toBeGreaterThan(0);
  });
});
