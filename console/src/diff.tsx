/**
 * A unified diff of two texts (jsdiff's structuredPatch: Myers' algorithm, hunks with context),
 * rendered as lines with old and new line numbers. Used for the file editor's edits and for
 * `/api/git/diff`.
 */
import { structuredPatch } from 'diff';
import { useMemo, useState } from 'preact/hooks';

const MAX_DIFF_CHARS = 400_000;
const SHOWN_LINES = 400;

interface Line {
  sign: '+' | '-' | ' ' | '@';
  text: string;
  old?: number;
  new?: number;
}

function diffLines(before: string, after: string, context: number): Line[] | null {
  if (before.length + after.length > MAX_DIFF_CHARS) return null;
  const patch = structuredPatch('a', 'b', before, after, '', '', { context, maxEditLength: 20_000 });
  if (!patch) return null;
  const out: Line[] = [];
  for (const h of patch.hunks) {
    out.push({ sign: '@', text: `@@ -${h.oldStart},${h.oldLines} +${h.newStart},${h.newLines} @@` });
    let o = h.oldStart;
    let n = h.newStart;
    for (const l of h.lines) {
      const sign = l[0];
      if (sign === '\\') continue; // "No newline at end of file"
      if (sign === '+') out.push({ sign, text: l.slice(1), new: n++ });
      else if (sign === '-') out.push({ sign, text: l.slice(1), old: o++ });
      else out.push({ sign: ' ', text: l.slice(1), old: o++, new: n++ });
    }
  }
  return out;
}

export function Diff({ before, after, context = 3 }: { before: string; after: string; context?: number }) {
  const [all, setAll] = useState(false);
  const lines = useMemo(() => diffLines(before, after, context), [before, after, context]);
  if (!lines) return <div class="muted small">Too large to show as a diff ({(before.length + after.length).toLocaleString()} characters).</div>;
  if (!lines.length) return <div class="muted small">No changes.</div>;
  const shown = all ? lines : lines.slice(0, SHOWN_LINES);
  return (
    <div class="diff">
      <table>
        <tbody>
          {shown.map((l, i) =>
            l.sign === '@' ? (
              <tr key={i} class="hunk">
                <td colSpan={3}>{l.text}</td>
              </tr>
            ) : (
              <tr key={i} class={l.sign === '+' ? 'add' : l.sign === '-' ? 'del' : ''}>
                <td class="ln">{l.old !== undefined ? l.old : ''}</td>
                <td class="ln">{l.new !== undefined ? l.new : ''}</td>
                <td class="tx">
                  <span class="sign">{l.sign}</span>
                  {l.text}
                </td>
              </tr>
            ),
          )}
        </tbody>
      </table>
      {lines.length > shown.length && (
        <button type="button" class="link" onClick={() => setAll(true)}>
          Show {lines.length - shown.length} more lines
        </button>
      )}
    </div>
  );
}
