/**
 * The one non-JSON body: `POST /api/file/upload` (multipart/form-data, the file in the `file`
 * part, as OpenHands' client sends it). Parsed by Node's own fetch implementation (undici's
 * FormData parser), after the body was read whole under the request body limit.
 */
import { BodyTooLarge } from './http.js';
import type { HttpResponse } from './uws.js';

export const isMultipart = (contentType: string) => /^multipart\/form-data\s*;\s*boundary=/i.test(contentType);

/** The raw body (chunks copied: uWS reuses their memory after the callback), refusing more than `limit` bytes. */
export function readBytes(res: HttpResponse, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let total = 0;
    res.onData((chunk, last) => {
      if (total < 0) return;
      total += chunk.byteLength;
      if (total > limit) {
        total = -1;
        return reject(new BodyTooLarge());
      }
      parts.push(Buffer.from(chunk.slice(0)));
      if (last) resolve(Buffer.concat(parts));
    });
  });
}

/** The `file` part's bytes, or null when the body has none (or is not valid multipart). */
export async function multipartFile(body: Buffer, contentType: string): Promise<Uint8Array | null> {
  try {
    const form = await new Response(new Blob([new Uint8Array(body)]), { headers: { 'content-type': contentType } }).formData();
    const file = form.get('file');
    if (file === null) return null;
    return typeof file === 'string' ? Buffer.from(file) : new Uint8Array(await file.arrayBuffer());
  } catch {
    return null;
  }
}
