/**
 * Child process of `grammar-stderr.spec.ts` (run with tsx): tries an output schema whose grammar
 * llama.cpp would refuse, and reports the outcome on stdout as one JSON line. Its stderr is
 * what the spec checks. argv[2]: `engine` (through Weir's llama.cpp engine) or `raw` (straight
 * to node-llama-cpp, bypassing Weir's check: the control that shows llama.cpp does print);
 * argv[3]: the schema (JSON); `WEIR_MODEL_PATH`: the GGUF model.
 */
import { isWeirError } from '@weir/core';
import { createLlamaCppEngine } from './llamacpp-engine';

const schema = JSON.parse(process.argv[3] ?? '{}') as object;

async function main(): Promise<void> {
  if (process.argv[2] === 'raw') {
    // A dynamic import: node-llama-cpp is ESM with top-level await.
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never' });
    let failed = false;
    try {
      await llama.createGrammarForJsonSchema(schema as never);
    } catch {
      failed = true;
    }
    process.stdout.write(`${JSON.stringify({ failed })}\n`);
    await llama.dispose();
    return;
  }
  const modelPath = process.env.WEIR_MODEL_PATH;
  if (!modelPath) throw new Error('WEIR_MODEL_PATH is not set');
  const engine = await createLlamaCppEngine({ kind: 'llamacpp', modelPath, threads: 1, sequences: 1, contextSize: 128, testTokenDelayMs: 0 });
  let error: unknown;
  try {
    const request = { input: { kind: 'text', text: 'Once upon a time' } as const, maxOutputTokens: 2, sampling: { temperature: 0 }, signal: new AbortController().signal, generationId: 'gen_stderr_child', outputSchema: schema };
    for await (const event of engine.generate(request)) void event;
  } catch (e) {
    error = e;
  }
  process.stdout.write(`${JSON.stringify(isWeirError(error) ? { code: error.code, param: error.param, message: error.message } : { error: String(error) })}\n`);
  await engine.close();
}

main().catch((err: unknown) => {
  process.stdout.write(`${JSON.stringify({ crashed: err instanceof Error ? err.name : String(err) })}\n`);
  process.exitCode = 1;
});
