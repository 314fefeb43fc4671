/**
 * Whole-file validation of a batch input: line numbers (1-based, counting empty lines), every
 * rule OpenAI states, each route's own body schema, limits, lines split across chunks, CRLF,
 * and items delivered in pages only while the file is clean.
 */
import type { NewBatchItem } from '@weir/core';
import { type BatchLimits, batchLimitsFromEnv, DEFAULT_BATCH_LIMITS, validateBatchInput } from './validate';

const chat = (id: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra } });

async function* chunked(text: string, size: number): AsyncIterable<Buffer> {
  const b = Buffer.from(text);
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

async function run(text: string, endpoint = '/v1/chat/completions', limits: Partial<BatchLimits> = {}, chunk = 7) {
  const items: NewBatchItem[] = [];
  const pages: number[] = [];
  const result = await validateBatchInput(chunked(text, chunk), endpoint, { ...DEFAULT_BATCH_LIMITS, ...limits }, async (page) => {
    pages.push(page.length);
    items.push(...page);
  }, 2);
  return { result, items, pages };
}

describe('validateBatchInput', () => {
  it('accepts a clean file read in small chunks (CRLF, a blank line, no final newline) and delivers its items in pages', async () => {
    const { result, items, pages } = await run(`${chat('a')}\r\n\n${chat('b')}\n${chat('c')}`);
    expect(result).toEqual({ ok: true, total: 3, model: 'm' });
    expect(items.map((i) => [i.index, i.customId])).toEqual([
      [0, 'a'],
      [1, 'b'],
      [2, 'c'],
    ]);
    expect(pages).toEqual([2, 1]);
    expect(items[0].body).toEqual({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
  });

  it('takes a line that names a use case instead of a model (its policy routes it), and refuses one naming neither', async () => {
    const byUseCase = JSON.stringify({ custom_id: 'uc', method: 'POST', url: '/v1/chat/completions', body: { use_case: 'support', messages: [{ role: 'user', content: 'hi' }] } });
    const neither = JSON.stringify({ custom_id: 'n', method: 'POST', url: '/v1/chat/completions', body: { messages: [{ role: 'user', content: 'hi' }] } });
    const accepted = await run(byUseCase);
    expect(accepted.result).toEqual({ ok: true, total: 1, model: null });
    const refused = await run(neither);
    expect(refused.result.ok).toBe(false);
    if (refused.result.ok) return;
    expect(refused.result.errors.map((e) => [e.line, e.code, e.param])).toEqual([[1, 'invalid_body', 'body.model']]);
  });

  it('reports every bad line with its number, code and param, and stores nothing', async () => {
    const lines = [
      chat('a'),
      'not json',
      '[1]',
      chat('a'),
      JSON.stringify({ custom_id: 'g', method: 'GET', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] } }),
      JSON.stringify({ custom_id: 'u', method: 'POST', url: '/v1/images/generations', body: {} }),
      JSON.stringify({ custom_id: 'v', method: 'POST', url: '/v1/completions', body: { model: 'm', prompt: 'x' } }),
      JSON.stringify({ custom_id: 'b', method: 'POST', url: '/v1/chat/completions', body: 'hello' }),
      chat('t', { temperature: 9 }),
      chat('f', { nonsense: true }),
      chat('s', { stream: true }),
      JSON.stringify({ custom_id: '', method: 'POST', url: '/v1/chat/completions', body: {} }),
    ];
    const { result, items } = await run(lines.join('\n'));
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.errors.map((e) => [e.line, e.code, e.param])).toEqual([
      [2, 'invalid_json_line', null],
      [3, 'invalid_json_line', null],
      [4, 'duplicate_custom_id', 'custom_id'],
      [5, 'invalid_method', 'method'],
      [6, 'invalid_url', 'url'],
      [7, 'mismatched_url', 'url'],
      [8, 'invalid_body', 'body'],
      [9, 'invalid_body', 'body.temperature'],
      [10, 'invalid_body', 'body.nonsense'],
      [11, 'invalid_body', 'body.stream'],
      [12, 'missing_custom_id', 'custom_id'],
      [12, 'invalid_body', 'body.model'],
    ]);
    for (const e of result.errors) expect(e.message).toMatch(new RegExp(`^Line ${e.line}`));
    expect(items).toEqual([]);
  });

  it('validates each endpoint with its own schema', async () => {
    const emb = JSON.stringify({ custom_id: 'e', method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: ['a', 'b'] } });
    expect((await run(emb, '/v1/embeddings')).result).toEqual({ ok: true, total: 1, model: 'm' });
    const badEmb = JSON.stringify({ custom_id: 'e', method: 'POST', url: '/v1/embeddings', body: { model: 'm' } });
    expect((await run(badEmb, '/v1/embeddings')).result).toMatchObject({ ok: false, errors: [{ line: 1, code: 'invalid_body', param: 'body.input' }] });
    const resp = JSON.stringify({ custom_id: 'r', method: 'POST', url: '/v1/responses', body: { model: 'm', input: 'hi' } });
    expect((await run(resp, '/v1/responses')).result).toEqual({ ok: true, total: 1, model: 'm' });
    const comp = JSON.stringify({ custom_id: 'c', method: 'POST', url: '/v1/completions', body: { model: 'm', prompt: 'once' } });
    expect((await run(comp, '/v1/completions')).result).toEqual({ ok: true, total: 1, model: 'm' });
  });

  it('refuses an empty file, too many lines, a line too long and a file too large', async () => {
    expect((await run('\n\n')).result).toMatchObject({ ok: false, errors: [{ code: 'empty_file', line: null }] });
    expect((await run([chat('a'), chat('b'), chat('c')].join('\n'), undefined, { maxLines: 2 })).result).toMatchObject({ ok: false, errors: [{ code: 'too_many_lines', line: 3 }] });
    const long = chat('x', { user: 'u'.repeat(200) });
    expect((await run(`${chat('a')}\n${long}\n${chat('c')}`, undefined, { maxLineBytes: 150 })).result).toMatchObject({ ok: false, errors: [{ code: 'line_too_long', line: 2 }] });
    expect((await run(`${chat('a')}\n${chat('b')}`, undefined, { maxFileBytes: 100 })).result).toMatchObject({ ok: false, errors: [{ code: 'file_too_large' }] });
  });

  it('keeps the first 100 errors and counts the rest', async () => {
    const { result } = await run(Array(150).fill('nope').join('\n'), undefined, {}, 4096);
    if (result.ok) throw new Error('expected errors');
    expect(result.errors).toHaveLength(101);
    expect(result.errors[100]).toMatchObject({ code: 'too_many_errors', message: expect.stringContaining('50 more') });
  });

  it('reads its limits from the environment, refusing nonsense', () => {
    expect(batchLimitsFromEnv({}, 1024)).toEqual({ maxFileBytes: 200 * 1024 * 1024, maxLines: 50_000, maxLineBytes: 1024 });
    expect(batchLimitsFromEnv({ WEIR_BATCH_MAX_FILE_BYTES: '1000', WEIR_BATCH_MAX_LINES: '10' }, 5)).toEqual({ maxFileBytes: 1000, maxLines: 10, maxLineBytes: 5 });
    expect(() => batchLimitsFromEnv({ WEIR_BATCH_MAX_LINES: '-1' }, 5)).toThrow(/WEIR_BATCH_MAX_LINES/);
  });
});
