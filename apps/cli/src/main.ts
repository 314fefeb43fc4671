/**
 * `weir`: Weir's operator command line (`npx weir --help`). The package's bin
 * (`bin/weir.mjs`) runs this file under tsx. Exit status: 0 done, 1 no answer or the API
 * refused, 2 bad usage.
 */
import { run } from './run';

run(process.argv.slice(2), {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
}).then(
  (status) => {
    process.exitCode = status;
  },
  (error: unknown) => {
    process.stderr.write(`weir: unexpected failure: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  },
);
