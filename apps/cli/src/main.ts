/**
 * `weir`: Weir's operator command line (`npx weir --help`). The package's bin
 * (`bin/weir.mjs`) runs this file under tsx. Exit status: 0 done, 1 no answer, 2 bad usage.
 */
import { runCli } from './run';

const status = runCli(process.argv.slice(2), {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
});
process.exitCode = status;
