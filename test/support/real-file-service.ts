/**
 * How a test's stand-in for the file service (a node program the sandbox runs in the service's place,
 * `fileService` / PARLEY_TEST_FILE_SERVICE) runs the real one, src/sandbox/file-service.pl, after
 * doing what it stands in for.
 *
 * The real service is perl, which turns on its taint checks for a program started with an effective
 * uid other than its real one, and a process that gives its effective uid 0 back loses the
 * capabilities the service needs to take it (`--as`). So a stand-in given `--as` takes those ids as
 * all of its own (real, effective and saved: a weaker service than the real one, whose real uid stays
 * out of the agent's reach, which the channel's tests do not need), reads the service's files (where
 * only those ids may go: a checkout under /tmp) and starts perl on the service, its library written in
 * place of the line that loads it, through a pipe on fd 3.
 */
import { FILE_SERVICE, FILE_SERVICE_LIB } from '../../src/sandbox/view.js';

/**
 * Lines of an ES module: `realService(stdio)` starts the real service (child_process's `stdio` for
 * fds 0-2) and returns its process. The module must import `spawn` from 'node:child_process' and `fs` from 'node:fs'.
 */
export const REAL_SERVICE_JS = String.raw`
const realService = (stdio) => {
  const as = process.argv.indexOf('--as');
  if (as > 0) { const [u, g] = process.argv[as + 1].split(':').map(Number); process.setgid(g); process.setuid(u); }
  const lib = fs.readFileSync(${JSON.stringify(FILE_SERVICE_LIB)}, 'utf8').replace(/\n1;\s*$/, '\n');
  const program = fs.readFileSync(${JSON.stringify(FILE_SERVICE)}, 'utf8').replace(/^BEGIN \{.*file-service-lib\.pl.*\}$/m, () => lib);
  const child = spawn('perl', ['/dev/fd/3', ...process.argv.slice(2)], { stdio: [...stdio, 'pipe'] });
  child.stdio[3].end(program);
  return child;
};
`;

/** Lines that end a stand-in by running the real service on its own stdin and stdout, until it ends. */
export const RUN_REAL_SERVICE_JS = `${REAL_SERVICE_JS}
realService(['inherit', 'inherit', 'inherit']).on('exit', (code) => process.exit(code ?? 0));
`;
