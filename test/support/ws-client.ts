/** A WebSocket test client that records every frame and close. */
import { unpack } from 'msgpackr';
import WebSocket from 'ws';
import { waitFor } from './daemon.js';

export interface Frames {
  ws: WebSocket;
  frames: any[];
  closed: { code: number; reason: string } | null;
  opened: Promise<void>;
  /** Resolves with the first frame matching `pred` (searching frames already received too). */
  next(pred: (f: any) => boolean, what?: string, timeoutMs?: number): Promise<any>;
  waitClose(timeoutMs?: number): Promise<{ code: number; reason: string }>;
  send(obj: unknown): void;
  close(): void;
}

export function connect(url: string, opts: { headers?: Record<string, string> } = {}): Frames {
  const ws = new WebSocket(url, { headers: opts.headers });
  const out: Frames = {
    ws,
    frames: [],
    closed: null,
    opened: new Promise((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('unexpected-response', (_req, res) => reject(new Error(`handshake refused: ${res.statusCode}`)));
      ws.once('error', reject);
    }),
    next: (pred, what = 'frame', timeoutMs = 10_000) => waitFor(() => out.frames.find(pred), what, timeoutMs),
    waitClose: (timeoutMs = 10_000) => waitFor(() => out.closed, 'close', timeoutMs) as Promise<{ code: number; reason: string }>,
    send: (obj) => ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj)),
    close: () => ws.close(),
  };
  out.opened.catch(() => {});
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    out.frames.push(isBinary ? { __binary: true, ...(unpack(data) as object) } : JSON.parse(data.toString('utf8')));
  });
  ws.on('close', (code, reason) => (out.closed = { code, reason: reason.toString() }));
  ws.on('error', () => {});
  return out;
}
