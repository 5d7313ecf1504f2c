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

/**
 * Parts a multipart body may have. The upload needs one (`file`); a body of MAX_BODY_BYTES cut into
 * 200,000 empty parts took undici's parser 10 s of CPU and +62 MiB, so the parts are
 * counted first: every occurrence of `--boundary` is a delimiter, since no part may contain it.
 */
const MAX_PARTS = 64;

/** Null when `body` has at most MAX_PARTS parts, otherwise why it is refused (413). */
export function multipartPartsError(body: Buffer, contentType: string): string | null {
  const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  if (!boundary) return null;
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  // the closing delimiter is one more than the parts
  let delimiters = 0;
  for (let i = body.indexOf(delimiter); i >= 0; i = body.indexOf(delimiter, i + delimiter.length)) {
    if (++delimiters > MAX_PARTS + 1) return `Multipart body has more than ${MAX_PARTS} parts: the upload takes one, \`file\``;
  }
  return null;
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
