/**
 * The physical limit for the load test: one bare uWS route with the same shape as the hot path
 * (`POST /api/conversations/{id}/events`) that only reads the body, parses the JSON and answers
 * `{"success":true}`. No validation, no store, no bus. `scripts/loadtest.ts` runs the identical
 * load against this and against the real daemon and prints the ratio.
 *
 * Loopback only. PORT (default 0: a free port). Prints one JSON line with `"port"` once listening.
 * Exits on SIGTERM / SIGINT.
 */
import { App, us_listen_socket_close, us_socket_local_port, type HttpResponse, type us_listen_socket } from '../bridge/uws.js';

const HOST = '127.0.0.1';
const MAX_BODY = 10 * 1024 * 1024;
const port = Number(process.env.PORT ?? 0);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`bare-server: PORT must be a whole number between 0 and 65535\n`);
  process.exit(1);
}

const OK = '{"success":true}';

function reply(res: HttpResponse, status: string, body: string): void {
  res.cork(() => {
    res.writeStatus(status).writeHeader('content-type', 'application/json').end(body);
  });
}

const app = App();

app.post('/api/conversations/:conversation_id/events', (res) => {
  let aborted = false;
  let chunks: Buffer[] | null = null;
  let size = 0;
  res.onAborted(() => {
    aborted = true;
  });
  res.onData((ab, isLast) => {
    if (aborted) return;
    size += ab.byteLength;
    if (size > MAX_BODY) {
      aborted = true;
      reply(res, '413 Payload Too Large', '{"detail":"Request body too large"}');
      return;
    }
    let text: string;
    if (isLast && chunks === null) {
      // the usual case: the whole body in one chunk, decoded straight from uWS's buffer (no copy)
      text = Buffer.from(ab).toString('utf8');
    } else {
      // uWS reuses the chunk's memory after the callback: keep a copy
      (chunks ??= []).push(Buffer.from(ab.slice(0)));
      if (!isLast) return;
      text = Buffer.concat(chunks, size).toString('utf8');
    }
    try {
      JSON.parse(text);
    } catch {
      reply(res, '422 Unprocessable Entity', '{"detail":[{"type":"json_invalid","loc":["body",0],"msg":"JSON decode error"}]}');
      return;
    }
    reply(res, '200 OK', OK);
  });
});

app.any('/*', (res) => {
  reply(res, '404 Not Found', '{"detail":"Not Found"}');
});

app.listen(HOST, port, (listenSocket: us_listen_socket | false) => {
  if (!listenSocket) {
    process.stderr.write(`bare-server: cannot listen on ${HOST}:${port}\n`);
    process.exit(1);
  }
  const actual = us_socket_local_port(listenSocket as never);
  process.stdout.write(`${JSON.stringify({ service: 'bare-server', host: HOST, port: actual, msg: `listening on http://${HOST}:${actual}` })}\n`);
  const stop = () => {
    us_listen_socket_close(listenSocket);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
});
