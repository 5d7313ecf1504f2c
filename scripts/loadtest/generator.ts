/**
 * The load generator of scripts/loadtest.ts, in a process of its own (spawned by the runner,
 * driven over IPC): its own keep-alive HTTP/1.1 client on `net` sockets, one request in flight per
 * connection, no pipelining; each connection writes to one node and round-robins over the
 * conversations written through that node.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { HOST, now } from './common.js';

/** One node: the conversations written through it (`convs`: their index among all conversations). */
export interface GenTarget {
  port: number;
  paths: string[];
  convs: number[];
}

export interface GenConfig {
  targets: GenTarget[];
  /** All conversations (the length of okPerConv). */
  conversations: number;
  body: string;
  headers: Record<string, string>;
  connections: number;
  /**
   * This process's connections are index, index + stride, ... of all; connection g targets
   * targets[g % targets.length] and round-robins over its conversations.
   */
  index: number;
  stride: number;
  timeoutMs: number;
}

export interface GenGo {
  startAt: number;
  warmupEnd: number;
  endAt: number;
}

export interface GenResult {
  okPerConv: number[];
  /** Non-200 statuses, all phases. */
  statuses: Record<string, number>;
  connectErrors: number;
  connErrors: number;
  timeouts: number;
  protocolErrors: number;
  /** Requests whose outcome is unknown (connection lost or timed out while in flight). */
  unknownOutcome: number;
  reconnects: number;
  serverCloses: number;
  completed: number;
  measured: number;
  measuredOk: number;
  latencies: Float64Array;
  windowMs: number;
  cpuMs: number;
  elu: number;
}

const CRLFCRLF = Buffer.from('\r\n\r\n');
const HTTP11 = Buffer.from('HTTP/1.1 ');
const CONTENT_LENGTH = /\r\ncontent-length: *(\d+)/i;

class Generator {
  /** Per target, one ready request per conversation. */
  readonly reqs: Buffer[][];
  readonly okPerConv: Uint32Array;
  readonly statuses: Record<string, number> = {};
  connectErrors = 0;
  connErrors = 0;
  timeouts = 0;
  protocolErrors = 0;
  unknownOutcome = 0;
  reconnects = 0;
  serverCloses = 0;
  completed = 0;
  measured = 0;
  measuredOk = 0;
  lat = new Float64Array(1 << 16);
  latN = 0;
  warmupEnd = Infinity;
  endAt = Infinity;
  started = false;
  private rr: number[];
  private conns: Conn[] = [];
  private live = 0;
  private finished!: () => void;
  readonly allDone = new Promise<void>((r) => (this.finished = r));

  constructor(readonly cfg: GenConfig) {
    const extra = Object.entries(cfg.headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    const len = Buffer.byteLength(cfg.body);
    this.reqs = cfg.targets.map((t) =>
      t.paths.map((p) =>
        Buffer.from(`POST ${p} HTTP/1.1\r\nhost: ${HOST}:${t.port}\r\ncontent-type: application/json\r\ncontent-length: ${len}\r\n${extra}\r\n${cfg.body}`),
      ),
    );
    this.okPerConv = new Uint32Array(cfg.conversations);
    this.rr = cfg.targets.map(() => cfg.index);
  }

  /** The next conversation of target `t`: its local index (into reqs[t]). */
  nextConv(t: number): number {
    const c = this.rr[t]! % this.reqs[t]!.length;
    this.rr[t]! += this.cfg.stride;
    return c;
  }

  async connectAll(): Promise<number> {
    for (let i = 0; i < this.cfg.connections; i++) this.conns.push(new Conn(this, (this.cfg.index + i * this.cfg.stride) % this.cfg.targets.length));
    const results = await Promise.allSettled(this.conns.map((c) => c.open()));
    return results.filter((r) => r.status === 'fulfilled').length;
  }

  start(go: GenGo): void {
    this.warmupEnd = go.warmupEnd;
    this.endAt = go.endAt;
    this.started = true;
    this.live = this.conns.filter((c) => !c.isDone).length;
    if (this.live === 0) this.finished();
    for (const c of this.conns) c.fire();
    const watchdog = setInterval(() => {
      const t = now();
      for (const c of this.conns) c.checkTimeout(t);
      // hard stop: nothing outlives the end of the run by more than one request timeout
      if (t > this.endAt + this.cfg.timeoutMs + 1000) {
        for (const c of this.conns) c.abandon();
      }
    }, 200);
    this.allDone.then(() => clearInterval(watchdog));
  }

  record(conv: number, status: number, t0: number, t1: number): void {
    this.completed += 1;
    if (status === 200) this.okPerConv[conv]! += 1;
    else this.statuses[status] = (this.statuses[status] ?? 0) + 1;
    if (t1 >= this.warmupEnd && t1 < this.endAt) {
      this.measured += 1;
      if (status === 200) this.measuredOk += 1;
      if (this.latN === this.lat.length) {
        const bigger = new Float64Array(this.lat.length * 2);
        bigger.set(this.lat);
        this.lat = bigger;
      }
      this.lat[this.latN++] = t1 - t0;
    }
  }

  connDone(): void {
    if (!this.started) return; // gave up before the start: never counted in `live`
    this.live -= 1;
    if (this.live === 0) {
      for (const c of this.conns) c.close();
      this.finished();
    }
  }
}

class Conn {
  private sock: net.Socket | null = null;
  private inflight = false;
  private done = false;
  private t0 = 0;
  private conv = 0;
  private pending: Buffer | null = null;
  private total = -1;
  private status = 0;

  constructor(
    private readonly g: Generator,
    /** The target (node) this connection writes to. */
    private readonly t: number,
  ) {}

  get isDone(): boolean {
    return this.done;
  }

  open(): Promise<void> {
    return new Promise((resolve, reject) => {
      const s = net.createConnection({ host: HOST, port: this.g.cfg.targets[this.t]!.port, noDelay: true });
      let connected = false;
      this.sock = s;
      s.on('connect', () => {
        connected = true;
        resolve();
      });
      s.on('data', (chunk: Buffer) => this.onData(s, chunk));
      s.on('error', (err) => {
        if (!connected) {
          this.g.connectErrors += 1;
          reject(err);
        }
      });
      s.on('close', () => this.onClose(s));
    });
  }

  fire(): void {
    if (this.done || !this.g.started) return;
    const t = now();
    if (t >= this.g.endAt || !this.sock || this.sock.destroyed) return this.finish();
    this.conv = this.g.nextConv(this.t);
    this.inflight = true;
    this.t0 = t;
    this.pending = null;
    this.total = -1;
    this.sock.write(this.g.reqs[this.t]![this.conv]!);
  }

  private onData(s: net.Socket, chunk: Buffer): void {
    if (s !== this.sock) return;
    if (!this.inflight) return this.protocolError(s);
    const buf = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
    if (this.total < 0) {
      const he = buf.indexOf(CRLFCRLF);
      if (he < 0) {
        if (buf.length > 65536) return this.protocolError(s);
        this.pending = buf;
        return;
      }
      if (buf.compare(HTTP11, 0, HTTP11.length, 0, HTTP11.length) !== 0) return this.protocolError(s);
      this.status = (buf[9]! - 48) * 100 + (buf[10]! - 48) * 10 + (buf[11]! - 48);
      const m = CONTENT_LENGTH.exec(buf.toString('latin1', 0, he));
      if (!m) return this.protocolError(s); // uWS always sends Content-Length for res.end()
      this.total = he + 4 + Number(m[1]);
    }
    if (buf.length < this.total) {
      this.pending = buf;
      return;
    }
    if (buf.length > this.total) return this.protocolError(s); // bytes nobody asked for
    this.pending = null;
    this.inflight = false;
    this.g.record(this.g.cfg.targets[this.t]!.convs[this.conv]!, this.status, this.t0, now());
    this.fire();
  }

  private protocolError(s: net.Socket): void {
    this.g.protocolErrors += 1;
    if (this.inflight) {
      this.inflight = false;
      this.g.unknownOutcome += 1;
    }
    s.destroy();
  }

  checkTimeout(t: number): void {
    if (this.inflight && t - this.t0 > this.g.cfg.timeoutMs) {
      this.inflight = false;
      this.g.timeouts += 1;
      this.g.unknownOutcome += 1;
      this.sock?.destroy();
    }
  }

  private onClose(s: net.Socket): void {
    if (s !== this.sock) return;
    if (this.inflight) {
      this.inflight = false;
      this.g.connErrors += 1;
      this.g.unknownOutcome += 1;
    } else if (!this.done && s.bytesRead > 0) {
      this.g.serverCloses += 1;
    }
    if (this.done) return;
    if (now() >= this.g.endAt || this.g.reconnects >= 10 * this.g.cfg.connections) return this.finish();
    this.g.reconnects += 1;
    setTimeout(() => {
      if (this.done) return;
      this.open().then(
        () => this.fire(),
        () => {
          /* its close event retries or finishes */
        },
      );
    }, 25);
  }

  abandon(): void {
    if (this.done) return;
    if (this.inflight) {
      this.inflight = false;
      this.g.timeouts += 1;
      this.g.unknownOutcome += 1;
    }
    this.finish();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.g.connDone();
  }

  close(): void {
    this.sock?.destroy();
  }
}

async function generatorMain(): Promise<void> {
  const send = (msg: unknown) => new Promise<void>((r) => process.send!(msg, () => r()));
  process.on('disconnect', () => process.exit(3)); // the orchestrator went away: stop at once
  const inbox: ((m: { type: string; [k: string]: unknown }) => void)[] = [];
  process.on('message', (m: { type: string; [k: string]: unknown }) => inbox.shift()?.(m));
  const next = () => new Promise<{ type: string; [k: string]: unknown }>((r) => inbox.push(r));

  const first = await next();
  if (first.type !== 'config') throw new Error('generator: expected config');
  const g = new Generator(first.cfg as GenConfig);
  const connected = await g.connectAll();
  const goWait = next();
  await send({ type: 'ready', connected });
  const go = (await goWait).go as GenGo;
  await new Promise((r) => setTimeout(r, Math.max(0, go.startAt - now())));
  let elu0 = performance.eventLoopUtilization();
  let cpu0 = process.cpuUsage();
  let w0 = now();
  let elu = 0;
  let cpuMs = 0;
  let windowMs = 0;
  setTimeout(
    () => {
      elu0 = performance.eventLoopUtilization();
      cpu0 = process.cpuUsage();
      w0 = now();
    },
    Math.max(0, go.warmupEnd - now()),
  );
  setTimeout(
    () => {
      elu = performance.eventLoopUtilization(elu0).utilization;
      const c = process.cpuUsage(cpu0);
      cpuMs = (c.user + c.system) / 1000;
      windowMs = now() - w0;
    },
    Math.max(0, go.endAt - now()),
  );
  g.start(go);
  await g.allDone;
  // wait for the window's closing sample when every connection stopped early
  while (windowMs === 0 && now() < go.endAt + 1000) await new Promise((r) => setTimeout(r, 20));
  const result: GenResult = {
    okPerConv: Array.from(g.okPerConv),
    statuses: g.statuses,
    connectErrors: g.connectErrors,
    connErrors: g.connErrors,
    timeouts: g.timeouts,
    protocolErrors: g.protocolErrors,
    unknownOutcome: g.unknownOutcome,
    reconnects: g.reconnects,
    serverCloses: g.serverCloses,
    completed: g.completed,
    measured: g.measured,
    measuredOk: g.measuredOk,
    latencies: g.lat.slice(0, g.latN),
    windowMs,
    cpuMs,
    elu,
  };
  await send({ type: 'result', result });
  process.exit(0);
}

generatorMain().catch((err) => {
  process.stderr.write(`loadtest generator: ${(err as Error)?.stack ?? err}\n`);
  process.exit(2);
});
