/**
 * Text as the agent writes it, shown safely: fenced code blocks become code blocks, `inline code`
 * becomes code, **bold** bold, everything else is plain text with its line breaks. No HTML is ever built from
 * event text (only text nodes), so nothing an agent or a repository writes can run in the page.
 * (A full Markdown renderer would need an HTML sanitiser beside it: twice the bundle for headings.)
 */
import type { ComponentChildren } from 'preact';

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

/** Terminal output without colour and cursor sequences (shown as text, not emulated). */
export const stripAnsi = (s: string) => s.replace(ANSI, '');

function inline(text: string): ComponentChildren[] {
  const out: ComponentChildren[] = [];
  const parts = text.split(/(`[^`\n]+`|\*\*[^*\n]+\*\*)/);
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    if (i % 2 === 0) {
      if (p) out.push(p);
    } else if (p[0] === '`') out.push(<code>{p.slice(1, -1)}</code>);
    else out.push(<strong>{p.slice(2, -2)}</strong>);
  }
  return out;
}

export function RichText({ text, class: cls }: { text: string; class?: string }) {
  const blocks: ComponentChildren[] = [];
  const parts = text.split(/^```[^\n]*\n([\s\S]*?)^```[ \t]*$/m);
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    if (i % 2 === 1) blocks.push(<pre class="code">{p.replace(/\n$/, '')}</pre>);
    else if (p.trim()) blocks.push(<div class="prose">{inline(p.replace(/^\n+|\n+$/g, ''))}</div>);
  }
  return <div class={cls}>{blocks}</div>;
}

/** Long text cut to `lines` with a toggle to show all of it. */
export function clip(text: string, lines: number): { shown: string; hidden: number } {
  let at = -1;
  for (let n = 0; n < lines; n++) {
    at = text.indexOf('\n', at + 1);
    if (at < 0) return { shown: text, hidden: 0 };
  }
  const rest = text.slice(at + 1);
  return { shown: text.slice(0, at), hidden: rest ? rest.split('\n').length : 0 };
}
