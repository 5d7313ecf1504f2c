export const SECRET_PLACEHOLDER = '<secret_hidden>';

/**
 * The one redaction applied at every exit (events, logs, errors, tool output, LLM-visible text).
 * Holds every known secret value; replaces each occurrence with `<secret_hidden>`.
 * Values shorter than 4 characters are ignored (they would mangle ordinary text).
 */
export class Redactor {
  private values = new Set<string>();
  private pattern: RegExp | null = null;

  add(...values: (string | null | undefined)[]): void {
    let changed = false;
    for (const v of values) {
      if (!v || v.length < 4 || this.values.has(v)) continue;
      this.values.add(v);
      changed = true;
    }
    if (changed) this.rebuild();
  }

  remove(value: string): void {
    if (this.values.delete(value)) this.rebuild();
  }

  private rebuild(): void {
    const sorted = [...this.values].sort((a, b) => b.length - a.length);
    this.pattern = sorted.length ? new RegExp(sorted.map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'), 'g') : null;
  }

  redact(text: string): string {
    if (!this.pattern || !text) return text;
    this.pattern.lastIndex = 0;
    return text.replace(this.pattern, SECRET_PLACEHOLDER);
  }

  /** Deep copy with every string redacted. */
  redactDeep<T>(value: T): T {
    if (!this.pattern) return value;
    return this.walk(value) as T;
  }

  private walk(v: unknown): unknown {
    if (typeof v === 'string') return this.redact(v);
    if (Array.isArray(v)) return v.map((x) => this.walk(x));
    if (v && typeof v === 'object' && !(v instanceof Uint8Array)) {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[k] = this.walk(x);
      return out;
    }
    return v;
  }

  get size(): number {
    return this.values.size;
  }
}
