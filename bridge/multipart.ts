/**
 * The one non-JSON body: `POST /api/file/upload` (multipart/form-data, the file in the `file` part,
 * as OpenHands' client sends it), parsed as it arrives by @fastify/busboy (the streaming parser
 * Node's own fetch used for `formData()`): the `file` part goes to the side channels as an
 * UploadSource, which pauses the request (uWS `pause`) while the conversation's file service is
 * behind, so an upload holds a few chunks of the daemon's memory whatever its size.
 */
import { Busboy } from '@fastify/busboy';
import { UploadSource } from '../src/conversation/file-transfer.js';
import { PayloadTooLargeError, RequestValidationError, UnavailableError } from '../src/errors.js';
import type { ResState } from './http.js';
import type { HttpResponse } from './uws.js';

export const isMultipart = (contentType: string) => /^multipart\/form-data\s*;\s*boundary=/i.test(contentType);

/**
 * Parts a multipart body may have. The upload needs one (`file`); a body of MAX_BODY_BYTES cut into
 * 200,000 empty parts took undici's parser 10 s of CPU and +62 MiB, so the parser stops at this many.
 */
const MAX_PARTS = 64;

/**
 * The `file` part of a multipart body as it arrives. The body is refused (the reader gets the error:
 * 413 or 422) past `maxBodyBytes`, past MAX_PARTS parts, or with a file larger than `maxFileBytes`;
 * a body that ends without a `file` part is 422 as before. A field named `file` (no filename) is
 * taken as the file's text, as undici's parser did.
 */
export function multipartUpload(res: HttpResponse, state: ResState, contentType: string, limits: { maxBodyBytes: number; maxFileBytes: number }): UploadSource {
  const source = new UploadSource({
    pause: () => state.aborted || res.pause(),
    resume: () => state.aborted || res.resume(),
  });
  const missing = () => new RequestValidationError([{ type: 'missing', loc: ['body', 'file'], msg: 'Field required', input: null }]);
  let found = false;
  let failed = false;
  const fail = (err: Error) => {
    failed = true;
    source.fail(err);
  };
  let parser: ReturnType<typeof Busboy>;
  try {
    parser = Busboy({
      headers: { 'content-type': contentType },
      limits: { parts: MAX_PARTS, files: 1, fields: MAX_PARTS, fileSize: limits.maxFileBytes, headerPairs: 100 },
    });
  } catch {
    fail(missing());
    res.onData(() => {});
    return source;
  }
  parser.on('file', (name, stream) => {
    if (name !== 'file' || found) return void stream.resume();
    found = true;
    stream.on('data', (d: Buffer) => source.push(d));
    stream.on('limit', () => fail(new PayloadTooLargeError(`The file is larger than ${limits.maxFileBytes} bytes, the most an upload takes`)));
    stream.on('end', () => source.end());
  });
  parser.on('field', (name, value) => {
    if (name !== 'file' || found) return;
    found = true;
    source.push(Buffer.from(value, 'utf8'));
    source.end();
  });
  parser.on('partsLimit', () => fail(new PayloadTooLargeError(`Multipart body has more than ${MAX_PARTS} parts: the upload takes one, \`file\``)));
  parser.on('error', () => fail(missing()));
  parser.on('finish', () => {
    if (!found) fail(missing());
  });
  // a client that goes away mid-body: the upload ends (its partial file is dropped), nothing waits on
  state.onAbort = () => fail(new UnavailableError('The upload was cut short: the client went away.'));
  let total = 0;
  res.onData((chunk, last) => {
    if (failed) return;
    total += chunk.byteLength;
    if (total > limits.maxBodyBytes) return fail(new PayloadTooLargeError(`Request body exceeds ${limits.maxBodyBytes} bytes`));
    // copied: uWS reuses the chunk's memory after this callback, and the parser hands out views of it
    parser.write(Buffer.from(chunk.slice(0)));
    if (last) parser.end();
  });
  return source;
}
