/**
 * Loaded into a test's daemon (`node --import`): every process the daemon itself starts (a fork of
 * the daemon, which holds its event loop until the child has exec'd) is named on its stderr as
 * `parley-test-spawn <file> <first argument>`, so a test can tell what the daemon forked from what its
 * spawner started.
 */
import { ChildProcess } from 'node:child_process';

const spawn = ChildProcess.prototype.spawn;
ChildProcess.prototype.spawn = function (options) {
  process.stderr.write(`parley-test-spawn ${options.file} ${options.args?.[1] ?? ''}\n`);
  return spawn.call(this, options);
};
