/**
 * The daemon's metrics registry (Prometheus). Part of the core: it knows no HTTP; the bridge serves
 * `render()` at GET /metrics.
 *
 * Recording is a plain number increment on a child the caller caches (no label building per event):
 * the request path records into these accumulators, which cost tens of nanoseconds, where a
 * prom-client child's `observe` hashes its labels on every call (~3-7 µs measured here).
 * prom-client, the maintained library, does the rest when a scrape comes: the text format,
 * escaping, and the default process metrics (CPU, RSS, heap, event-loop lag, GC). It is loaded on
 * the first scrape, which keeps it out of the daemon's start time and idle memory; the default
 * process metrics observe from that scrape on (CPU and RSS are totals read from the kernel anyway).
 */
import fs from 'node:fs';

type Labels = Record<string, string>;
interface Sample {
  labels: Labels;
  value: number;
  metricName?: string;
}
/** The shape prom-client's Registry reads from a metric. */
interface Exported {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  values: Sample[];
  aggregator: 'sum';
}
interface Source {
  name: string;
  help: string;
  type: Exported['type'];
  get(): Exported | Promise<Exported>;
}

const sources: Source[] = [];
const keyOf = (values: readonly string[]) => values.join('\u0001');
const labelsOf = (names: readonly string[], values: readonly string[]): Labels => Object.fromEntries(names.map((n, i) => [n, values[i] ?? '']));

class CounterChild {
  value = 0;
  inc(n = 1): void {
    this.value += n;
  }
}

/** A metric with labels: one child per label values, made once; keep it where the event happens. */
abstract class Family<C> {
  protected children = new Map<string, { values: string[]; child: C }>();
  constructor(
    readonly name: string,
    readonly help: string,
    protected readonly labelNames: readonly string[],
    type: Exported['type'],
  ) {
    sources.push({ name, help, type, get: () => this.export() });
  }
  protected abstract make(): C;
  protected abstract export(): Exported;
  child(...values: string[]): C {
    const k = keyOf(values);
    let c = this.children.get(k);
    if (!c) this.children.set(k, (c = { values, child: this.make() }));
    return c.child;
  }
}

class Counter extends Family<CounterChild> {
  constructor(name: string, help: string, labelNames: readonly string[] = []) {
    super(name, help, labelNames, 'counter');
  }
  protected make(): CounterChild {
    return new CounterChild();
  }
  inc(...values: string[]): void {
    this.child(...values).inc();
  }
  protected export(): Exported {
    const values = [...this.children.values()].map(({ values: v, child }) => ({ labels: labelsOf(this.labelNames, v), value: child.value }));
    return { name: this.name, help: this.help, type: 'counter', values, aggregator: 'sum' };
  }
}

/** Latency buckets in seconds, from sub-millisecond requests to multi-minute LLM calls. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export class HistogramChild {
  count = 0;
  sum = 0;
  readonly buckets: Float64Array;
  constructor(private readonly bounds: readonly number[]) {
    this.buckets = new Float64Array(bounds.length);
  }
  observe(v: number): void {
    this.count += 1;
    this.sum += v;
    const b = this.bounds;
    for (let i = 0; i < b.length; i++) {
      if (v <= b[i]!) {
        this.buckets[i]! += 1;
        return;
      }
    }
  }
}

class Histogram extends Family<HistogramChild> {
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[] = [],
    private readonly bounds: readonly number[] = LATENCY_BUCKETS,
  ) {
    super(name, help, labelNames, 'histogram');
  }
  protected make(): HistogramChild {
    return new HistogramChild(this.bounds);
  }
  protected export(): Exported {
    const values: Sample[] = [];
    for (const { values: v, child } of this.children.values()) {
      const labels = labelsOf(this.labelNames, v);
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += child.buckets[i]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: String(le) }, value: acc });
      });
      values.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: '+Inf' }, value: child.count });
      values.push({ metricName: `${this.name}_sum`, labels, value: child.sum });
      values.push({ metricName: `${this.name}_count`, labels, value: child.count });
    }
    return { name: this.name, help: this.help, type: 'histogram', values, aggregator: 'sum' };
  }
}

/** A gauge read at scrape time from whoever registered a reader (several may add up, e.g. per module). */
class Gauge {
  private readers: (() => Iterable<[string[], number]>)[] = [];
  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[] = [],
  ) {
    sources.push({ name, help, type: 'gauge', get: () => this.export() });
  }
  /** Adds a reader; returns its removal. */
  read(fn: () => Iterable<[string[], number]>): () => void {
    this.readers.push(fn);
    return () => {
      this.readers = this.readers.filter((r) => r !== fn);
    };
  }
  private export(): Exported {
    const sums = new Map<string, { values: string[]; value: number }>();
    for (const r of this.readers) {
      try {
        for (const [values, value] of r()) {
          const k = keyOf(values);
          const s = sums.get(k);
          if (s) s.value += value;
          else sums.set(k, { values, value });
        }
      } catch {
        // a reader that fails (e.g. a closed store) reports nothing
      }
    }
    const values = [...sums.values()].map((s) => ({ labels: labelsOf(this.labelNames, s.values), value: s.value }));
    return { name: this.name, help: this.help, type: 'gauge', values, aggregator: 'sum' };
  }
}

/** "openai/gpt-5" → ["openai", "gpt-5"]. */
export function providerAndModel(model: string): [string, string] {
  const i = model.indexOf('/');
  return i > 0 ? [model.slice(0, i), model.slice(i + 1)] : ['unknown', model];
}

export const metrics = {
  httpRequests: new Histogram(
    'parley_http_request_duration_seconds',
    'HTTP requests by method, route template and status: latency until the response was written',
    ['method', 'route', 'status'],
  ),
  eventsAppended: new Counter('parley_events_appended_total', 'Events committed to the event log'),
  eventsPublished: new Counter('parley_events_published_total', 'Events published to conversation topics (committed and transient)'),
  wsSubscribers: new Gauge('parley_ws_subscribers', 'Open WebSocket event subscribers'),
  wsDropped: new Counter('parley_ws_dropped_subscribers_total', 'WebSocket subscribers closed for falling behind (1013)'),
  conversations: new Gauge('parley_conversations', 'Conversations by execution status', ['execution_status']),
  agentRuns: new Counter('parley_agent_runs_total', 'Agent runs started'),
  agentRunsEnded: new Counter('parley_agent_runs_ended_total', 'Agent runs ended, by the execution status they left', ['execution_status']),
  agentRunning: new Gauge('parley_agent_runs_active', 'Agent runs in progress'),
  agentSteps: new Counter('parley_agent_steps_total', 'Agent loop steps (one LLM call each)'),
  llmCalls: new Histogram('parley_llm_request_duration_seconds', 'LLM calls (with their retries) by provider, model and outcome: latency', [
    'provider',
    'model',
    'outcome',
  ]),
  llmTokens: new Counter('parley_llm_tokens_total', 'LLM tokens by provider, model and direction', ['provider', 'model', 'direction']),
  toolCalls: new Histogram('parley_tool_call_duration_seconds', 'Tool calls by tool and outcome: latency', ['tool', 'outcome']),
  mcpServers: new Gauge('parley_mcp_servers', 'MCP servers by state', ['state']),
  processes: new Gauge('parley_child_processes', 'Processes the daemon started (shells, sandboxes, MCP servers, git...), alive now, by command name', [
    'command',
  ]),
  sandboxes: new Gauge('parley_sandboxes', 'Conversations with live sandboxed processes, by sandbox mode (bwrap or none)', ['mode']),
  sandboxSpares: new Gauge('parley_sandbox_spares', 'Sandboxes started ahead for the next conversations (bwrap), by state: ready to be taken, or starting', [
    'state',
  ]),
  sandboxProcesses: new Gauge(
    'parley_sandbox_processes',
    'Processes started through the sandbox launcher (shells, setup.sh, git, MCP servers) alive now; their own children not counted',
    ['mode'],
  ),
  storeAppend: new Histogram(
    'parley_store_append_duration_seconds',
    'Event log frames: from the first append queued for the frame until the frame was committed',
    [],
    [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
  ),
  storeUnindexed: new Gauge('parley_store_unindexed_events', 'Committed events the index has not taken yet (readable from memory)'),
  conversationsLoaded: new Gauge('parley_conversations_loaded', 'Conversations loaded in memory (idle ones beyond MAX_LOADED_CONVERSATIONS are evicted)'),
  conversationsLoadedBytes: new Gauge(
    'parley_conversations_loaded_bytes',
    'Estimated bytes of the loaded conversation records (large instructions and MCP configs stay in the store)',
  ),
  storeIndexLag: new Gauge('parley_store_index_lag_seconds', 'Age of the oldest committed frame the index has not taken yet'),
};

/** The daemon's live descendants by command name (read from /proc: whatever started them). */
function descendants(): [string[], number][] {
  const children = new Map<number, number[]>();
  const comm = new Map<number, string>();
  let dirs: string[];
  try {
    dirs = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  for (const d of dirs) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const fields = stat.slice(close + 2).split(' ');
      if (fields[0] === 'Z') continue;
      const pid = Number(d);
      const ppid = Number(fields[1]);
      comm.set(pid, stat.slice(stat.indexOf('(') + 1, close));
      let list = children.get(ppid);
      if (!list) children.set(ppid, (list = []));
      list.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  const counts = new Map<string, number>();
  const stack = [...(children.get(process.pid) ?? [])];
  while (stack.length) {
    const pid = stack.pop()!;
    const name = comm.get(pid) ?? 'unknown';
    counts.set(name, (counts.get(name) ?? 0) + 1);
    stack.push(...(children.get(pid) ?? []));
  }
  return [...counts].map(([name, n]) => [[name], n]);
}
metrics.processes.read(descendants);

let registry: Promise<{ metrics(): Promise<string>; contentType: string }> | null = null;

/** The Prometheus text exposition of every metric, default process metrics included. */
export async function render(): Promise<{ contentType: string; body: string }> {
  registry ??= import('prom-client').then(({ default: client }) => {
    const reg = new client.Registry();
    client.collectDefaultMetrics({ register: reg });
    for (const s of sources) reg.registerMetric(s as never);
    return reg;
  });
  const reg = await registry;
  return { contentType: reg.contentType, body: await reg.metrics() };
}
