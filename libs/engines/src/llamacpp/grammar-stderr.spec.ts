/**
 * llama.cpp's native code prints a grammar it refuses — the tenant schema's property names — to
 * the process's stderr with `fprintf`, beyond any logger (issue 14). The real engine runs in a
 * child process (tsx) whose file descriptor 2 is captured: a schema with `minLength` 3000 (above
 * llama.cpp's 2000) is refused by Weir before a grammar exists, and the sentinel property name
 * never reaches stderr. The control run hands the same schema straight to node-llama-cpp and
 * shows the capture would see it.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { tinyModelPath } from '@weir/testing';

jest.setTimeout(120_000);

const run = promisify(execFile);
const CHILD = path.join(__dirname, 'grammar-stderr.child.ts');
const SENTINEL = 'SNTL_prop_7q';
const SCHEMA = JSON.stringify({ type: 'object', properties: { [SENTINEL]: { type: 'string', minLength: 3000 } }, required: [SENTINEL] });

async function child(mode: 'engine' | 'raw'): Promise<{ result: Record<string, unknown>; stderr: string }> {
  const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', CHILD, mode, SCHEMA], {
    cwd: path.resolve(__dirname, '../../../..'),
    env: { ...process.env, WEIR_MODEL_PATH: tinyModelPath(), NODE_OPTIONS: '' },
    timeout: 100_000,
    maxBuffer: 16 * 1024 * 1024,
  });
  const last = stdout.trim().split('\n').pop() ?? '{}';
  return { result: JSON.parse(last) as Record<string, unknown>, stderr };
}

describe('a schema llama.cpp would refuse never reaches it (fd 2 of a child process)', () => {
  it('control: handed straight to node-llama-cpp, the grammar (with the property name) is printed to stderr', async () => {
    const { result, stderr } = await child('raw');
    expect(result).toEqual({ failed: true });
    expect(stderr).toContain(SENTINEL);
  });

  it('through the engine: a specific 400 naming output_schema, minLength and the limit, and nothing of the schema on stderr', async () => {
    const { result, stderr } = await child('engine');
    expect(result).toMatchObject({ code: 'invalid_request', param: 'output_schema' });
    expect(result.message).toMatch(/`minLength` 3000 is above 1000/);
    expect(stderr).not.toContain(SENTINEL);
    expect(stderr).not.toMatch(/error parsing grammar/);
  });
});
