/**
 * What this machine charges for the kernel work every other benchmark leans on, measured in the same
 * minutes as them: the figures of the others (a sandbox's start, a text turn, the hot path) move with
 * these from one hour or machine to the next, and they say which of a program's costs are the machine's.
 *
 *   npx tsx scripts/bench-machine.ts [--runs 3]
 *
 * Printed (medians of `--runs`):
 *   - a system call: `syscall(SYS_getppid)` in a perl loop, less the same loop without the call;
 *   - a page fault on memory never touched: a new 64 MiB ArrayBuffer (its pages mapped, none present)
 *     written once every 4 KiB, against writing it all again once present (the page-table work alone);
 *   - a program's start from perl: the child's CPU from the fork to its exit (user + system, all its
 *     threads, from getrusage): /bin/true, sh, bash, perl -e1, nft --version, node -e 0;
 *   - the parent's CPU for one fork and exec of /bin/true: from node (child_process.spawn, as the daemon and
 *     its spawner start every program: libuv forks the whole process) and from perl (a small process).
 * A machine that traps system calls or page faults (a VM without hardware paging support) shows it here:
 * every process start, and every fork of a large process, pays for its page faults.
 */
import { spawn, spawnSync } from 'node:child_process';
import os from 'node:os';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '3' } } });
const RUNS = Number(values.runs);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const f = (x: number, digits = 2) => x.toFixed(digits);

function perl(program: string, ...args: string[]): string {
  const r = spawnSync('perl', ['-e', program, ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`perl failed: ${r.stderr}`);
  return r.stdout.trim();
}

/** µs per system call: N getppid calls (x86_64: 110; aarch64: 173) less the loop alone. */
function syscallUs(): number {
  const nr = process.arch === 'arm64' ? 173 : 110;
  const out = perl(
    `use Time::HiRes qw(time); my $n = 200000; my $t = time; for (1..$n) { syscall(${nr}) } my $a = time - $t;` +
      ` $t = time; for (1..$n) { my $x = 1 } my $b = time - $t; print(($a - $b) / $n * 1e6)`,
  );
  return Number(out);
}

/** µs per 4 KiB page: the first write to each page of a new buffer, less writing the same pages again. */
function pageFaultUs(): number {
  const bytes = 64 * 1024 * 1024;
  const buf = new Uint8Array(new ArrayBuffer(bytes));
  let t = performance.now();
  for (let i = 0; i < bytes; i += 4096) buf[i] = 1;
  const first = performance.now() - t;
  t = performance.now();
  for (let i = 0; i < bytes; i += 4096) buf[i] = 2;
  const again = performance.now() - t;
  return ((first - again) * 1000) / (bytes / 4096);
}

/**
 * perl's CPU clock: getrusage(2) by its system call (98 on x86_64, 165 on aarch64; perl-base has no
 * BSD::Resource), microseconds where `times` counts 10 ms ticks. `cpu(WHO)`: user + system in ms, WHO 0
 * for this process, -1 for its children waited for.
 */
const PERL_CPU =
  `sub cpu { my $b = "\\0" x 144; syscall(${process.arch === 'arm64' ? 165 : 98}, $_[0], $b) == 0 or die "getrusage: $!";` +
  ' my ($us, $uu, $ss, $su) = unpack("q4", $b); return ($us + $ss) * 1e3 + ($uu + $su) / 1e3 }';

/** ms of a program's start per start: the child's CPU from the fork to its exit (all its threads), N starts. */
function startCpuMs(argv: string[], n = 20): number {
  const out = perl(
    `${PERL_CPU} my $n = shift; my $c0 = cpu(-1);` +
      ' for (1..$n) { my $p = fork; if (!$p) { open STDOUT, ">", "/dev/null"; exec { $ARGV[0] } @ARGV; exit 127 } waitpid $p, 0 }' +
      ' print((cpu(-1) - $c0) / $n)',
    String(n),
    ...argv,
  );
  return Number(out);
}

/** ms of the parent's CPU per fork and exec of /bin/true from perl. */
function perlForkMs(n = 60): number {
  return Number(
    perl(
      `${PERL_CPU} my $n = shift; my $c0 = cpu(0); for (1..$n) { my $p = fork; if (!$p) { exec "/bin/true"; exit 127 } waitpid $p, 0 }` +
        ' print((cpu(0) - $c0) / $n)',
      String(n),
    ),
  );
}

/** ms of this process's CPU per child_process.spawn of /bin/true (with piped stdio, detached: as the spawner starts one). */
async function nodeSpawnMs(n = 60): Promise<number> {
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    await new Promise<void>((resolve, reject) => {
      const c = spawn('/bin/true', [], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      c.once('error', reject);
      c.once('close', () => resolve());
    });
  }
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000 / n;
}

const programs: [string, string[]][] = [
  ['/bin/true', ['/bin/true']],
  ['sh -c true', ['sh', '-c', 'true']],
  ['bash -c true', ['bash', '-c', 'true']],
  ['perl -e1', ['perl', '-e1']],
  ['nft --version', ['nft', '--version']],
  ['node -e 0', [process.execPath, '-e', '0']],
];

const rows: Record<string, number[]> = {};
const put = (k: string, v: number) => (rows[k] ??= []).push(v);
const load0 = os.loadavg();
for (let r = 0; r < RUNS; r++) {
  put('syscall', syscallUs());
  put('fault', pageFaultUs());
  for (const [name, argv] of programs) {
    const available = spawnSync(argv[0]!, ['--version'], { stdio: 'ignore' }).error === undefined || argv[0] === '/bin/true';
    if (available) put(name, startCpuMs(argv, name === 'node -e 0' ? 5 : 20));
  }
  put('node spawn', await nodeSpawnMs());
  put('perl fork', perlForkMs());
}

const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
console.log(
  `this machine (${os.cpus().length} × ${cpu}, Linux ${os.release()}), medians of ${RUNS} runs; load average ` +
    `${load0.map((x) => x.toFixed(2)).join(' ')} at the start, ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')} at the end (command: npx tsx scripts/bench-machine.ts --runs ${RUNS})`,
);
console.log('| what | cost |');
console.log('|---|---:|');
console.log(`| a system call (getppid) | ${f(median(rows.syscall!))} µs |`);
console.log(`| a page fault on a page never touched (4 KiB) | ${f(median(rows.fault!))} µs |`);
for (const [name] of programs)
  if (rows[name]) console.log(`| a start of \`${name}\` from perl: the child's CPU, fork to exit | ${f(median(rows[name]!))} ms |`);
console.log(`| one fork and exec of /bin/true: node's CPU (child_process.spawn) | ${f(median(rows['node spawn']!))} ms |`);
console.log(`| the same: perl's CPU (fork, exec) | ${f(median(rows['perl fork']!))} ms |`);
