/**
 * What the daemon says to a conversation's bash: the init script every shell runs first (the
 * completion mark, the FIFO-aware `read` and `python` wrappers: session.ts says why), the lines a new
 * shell runs to take up an old one's state after an idle close, and quoting.
 */

/** The shell's copy of its original stdout: every command writes there (a command's `exec >file` cannot hide later output). */
export const OUT_FD = 63;
/** A command's end mark on fd 63: MARK, the command's nonce, `:<exit code>:<pwd>`, END. */
export const MARK = '\x1ePARLEY:';
export const END = '\x1f';
/** A command's begin mark, on bash's own stderr: BEGIN, the command's nonce, a newline (ShellSession.run). */
export const BEGIN = '\x1eB';
/** Shell code that prints a begin mark for `word` (a nonce, quoted as the shell needs it) on bash's stderr. */
export const printBegin = (word: string) => `printf '\\036B%s\\n' ${word} >&2`;

export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Names a shell started with another environment (a spare sandbox's: pool.ts) cannot be given as its
 * start would have: bash reads them only when it starts, or they are its own and read-only.
 */
const SET_AT_START = new Set(['SHELLOPTS', 'BASHOPTS', 'POSIXLY_CORRECT', 'BASH_ENV', 'ENV', 'BASH_XTRACEFD', 'SHLVL', 'PWD', 'OLDPWD']);
const READ_ONLY = new Set(['BASHPID', 'BASH_VERSINFO', 'EUID', 'UID', 'PPID', 'GROUPS']);

/** Whether envScript gives a running shell these variables as its start with them would have. */
export function settableEnv(missing: Record<string, string | null>): boolean {
  return Object.keys(missing).every((k) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) && !SET_AT_START.has(k) && !READ_ONLY.has(k));
}

/** The lines that give a running shell the environment it lacks: each variable exported, or unset (null). */
export function envScript(missing: Record<string, string | null>): string {
  let out = '';
  for (const [k, v] of Object.entries(missing)) out += v === null ? `unset -v ${k}\n` : `export ${k}=${shellQuote(v)}\n`;
  return out;
}

export const INIT_SCRIPT = String.raw`
set +H +o history 2>/dev/null; unset HISTFILE MAILCHECK PROMPT_COMMAND; PS1=''; PS2=''; PS0=''; PS4='+ '
exec ${OUT_FD}>&1
__parley_n=''
__parley_fifo=''
__parley_pc() {
  local __parley_ec=$?
  if [ -n "$__parley_n" ]; then
    printf '\036PARLEY:%s:%s:%s\037\n' "$__parley_n" "$__parley_ec" "$PWD" >&${OUT_FD}
    __parley_n=''
  fi
}
declare -r PROMPT_COMMAND=__parley_pc
__parley_stdin_is_terminal() { [ -n "$__parley_fifo" ] && [ /dev/stdin -ef "$__parley_fifo" ]; }
read() {
  local __parley_o __parley_p='' OPTIND=1 OPTARG OPTERR=0
  while getopts ':ad:ei:n:N:p:rst:u:' __parley_o; do
    if [ "$__parley_o" = p ]; then __parley_p=$OPTARG; fi
  done
  if [ -n "$__parley_p" ] && __parley_stdin_is_terminal; then printf '%s' "$__parley_p" >&2; fi
  builtin read "$@"
}
__parley_py_repl() {
  local a
  for a in "$@"; do
    case "$a" in -c*|-m*|-) return 1 ;; -*) ;; *) return 1 ;; esac
  done
  __parley_stdin_is_terminal
}
python3() { if __parley_py_repl "$@"; then command python3 -i -u "$@"; else command python3 "$@"; fi; }
python() { if __parley_py_repl "$@"; then command python -i -u "$@"; else command python "$@"; fi; }
`;

/** What a shell keeps between commands that a new shell can take up (after an idle close). */
export interface ShellState {
  cwd: string;
  /** `declare -x NAME="value"` lines as `export -p` prints them (bash quotes the values). */
  exports: string[];
  /** FIFOs the old shell made and never used, left in the conversation's io directory (keepFifos). */
  fifos?: KeptFifo[];
}

/** A FIFO made for a command's input, by its host path and the inode it was made as. */
export interface KeptFifo {
  path: string;
  dev: number;
  ino: number;
}

/** Exported names a restored shell does not take from the old one (the shell's own, or set anew at start). */
const NOT_RESTORED = new Set(['PWD', 'OLDPWD', 'SHLVL', '_', 'PS0', 'PS1', 'PS2', 'PS4', 'PROMPT_COMMAND', 'BASH_ENV', 'ENV', 'HISTFILE', 'TERM']);

/**
 * The lines of `state` a new shell runs to take it up: every export but those above and those the
 * new shell's environment sets itself (the conversation's secrets are set anew, never an old value),
 * then the directory (the workspace when it is gone).
 */
export function restoreScript(state: ShellState, env: Record<string, string>): string {
  const lines: string[] = [];
  for (const line of state.exports) {
    const m = /^declare -x ([A-Za-z_][A-Za-z0-9_]*)(=|$)/.exec(line);
    if (!m || NOT_RESTORED.has(m[1]!) || (m[1]! in env && m[1] !== 'PATH')) continue;
    lines.push(line);
  }
  lines.push(`builtin cd -- ${shellQuote(state.cwd)} 2>/dev/null || true`);
  return lines.join('\n');
}
