/**
 * Files served to browsers: the Content-Type of a file by its name's extension (the console's, a web
 * app's, a workspace's files), and the answer for a file kept in memory (ETag, gzip when accepted).
 */
import path from 'node:path';
import { type ResState, send } from './http.js';
import type { HttpResponse } from './uws.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.htm': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.webmanifest': 'application/manifest+json; charset=utf-8',
  '.xml': 'application/xml; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.csv': 'text/csv; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.pdf': 'application/pdf',
  '.wasm': 'application/wasm',
  '.woff': 'font/woff',
  '.woff2': 'font/woff2',
  '.ttf': 'font/ttf',
  '.wav': 'audio/wav',
  '.mp3': 'audio/mpeg',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
};

/** The type of a file named `name`, or null when its extension is not known. */
export function contentTypeOf(name: string): string | null {
  return TYPES[path.extname(name).toLowerCase()] ?? null;
}

/** A file kept in memory to serve: its type, bytes, gzip copy (if worth it) and ETag. */
export interface ServedFile {
  type: string;
  body: Buffer;
  gzip: Buffer | null;
  etag: string;
}

/** Answers `file` with `headers`: 304 when the browser has it (`ifNoneMatch`), else its bytes, gzipped when accepted. */
export function serveFile(
  res: HttpResponse,
  state: ResState,
  file: ServedFile,
  headers: Record<string, string>,
  ifNoneMatch: string,
  acceptsGzip: boolean,
): void {
  if (state.aborted) return;
  if (ifNoneMatch === file.etag) {
    res.cork(() => {
      res.writeStatus('304 Not Modified').writeHeader('etag', file.etag).writeHeader('vary', 'accept-encoding');
      for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
      res.endWithoutBody();
    });
    state.aborted = true;
    state.metric?.end(304, state.t0!);
    return;
  }
  const z = acceptsGzip ? file.gzip : null;
  send(res, state, 200, z ?? file.body, file.type, { ...headers, etag: file.etag, vary: 'accept-encoding', ...(z ? { 'content-encoding': 'gzip' } : {}) });
}
