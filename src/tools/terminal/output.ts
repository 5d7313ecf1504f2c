/** Text clean-up for terminal output: ANSI escapes, carriage returns, truncation. */

// CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), DCS/PM/APC/SOS strings, charset selection,
// and the remaining two-character escapes. Also the 8-bit CSI (0x9b) form.
const ANSI_RE =
  // eslint-disable-next-line no-control-regex
  /\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[PX^_][^\x1b]*(?:\x1b\\)?|\x1b[()*+][0-9A-Za-z]|\x1b[ -/]*[0-~]?/g;
// Control characters other than tab and newline (carriage returns are handled separately).
// eslint-disable-next-line no-control-regex
const CONTROL_RE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g;

// An interactive bash without a terminal prints this when a foreground child is killed by a signal.
const BASH_TTY_NOISE_RE = /^bash: \[\d+: \d+ \(\d+\)\] tcsetattr: Inappropriate ioctl for device\n/gm;

function stripAnsi(text: string): string {
  return text.replace(ANSI_RE, '');
}

/**
 * Makes raw terminal output readable: removes ANSI escape codes, turns CRLF into LF, keeps only
 * what follows the last bare carriage return on each line (what a terminal would finally show for a
 * progress bar), and drops other control characters.
 */
export function cleanTerminalOutput(text: string): string {
  let out = stripAnsi(text).replace(/\r+\n/g, '\n').replace(BASH_TTY_NOISE_RE, '');
  if (out.includes('\r')) {
    out = out
      .split('\n')
      .map((line) => {
        const idx = line.lastIndexOf('\r', line.length - 2);
        return idx >= 0 ? line.slice(idx + 1).replace(/\r/g, '') : line.replace(/\r/g, '');
      })
      .join('\n');
  }
  return out.replace(CONTROL_RE, '');
}

/**
 * Cuts `text` in the middle so that the result (including the note) is at most `max` characters.
 * `note` receives the number of characters removed.
 */
export function truncateMiddle(text: string, max: number, note: (omitted: number) => string): string {
  if (text.length <= max) return text;
  // The note's length depends on the number it contains: iterate until the numbers agree.
  let omitted = text.length;
  let noteText = note(omitted);
  for (let i = 0; i < 5; i++) {
    const keep = Math.max(0, max - noteText.length);
    const next = text.length - keep;
    if (next === omitted) break;
    omitted = next;
    noteText = note(omitted);
  }
  const keep = text.length - omitted;
  const head = Math.ceil(keep / 2);
  const tail = keep - head;
  return text.slice(0, head) + noteText + (tail > 0 ? text.slice(text.length - tail) : '');
}
