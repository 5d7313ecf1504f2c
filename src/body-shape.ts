/**
 * How much structure a client's JSON (or msgpack) may carry, checked before it is decoded.
 *
 * The byte limit alone does not bound memory: a decoded value costs far more than its text when the
 * text is dense. `[[],[],…]` is 3 bytes a value and ~45 bytes of V8 heap once parsed; 10 MiB of it is
 * 3.5 million arrays (~150 MiB), and validating it multiplies that again (zod builds an issue of
 * ~2 KB for each invalid item: a message whose `content` was such an array grew the daemon past 4 GB).
 * Counting is cheap and needs no tree, so every body is counted first and refused before
 * `JSON.parse` (or msgpack's `unpack`) builds anything:
 *
 * - values: objects, arrays, strings, numbers, true/false/null (object keys are not counted: each
 *   comes with a value). Legitimate bodies carry tens to a few hundred (a message: ~10; the
 *   OpenHands client's create request with an agent spec: ~100–300; a large MCP config: ~1,000);
 *   10,000 leaves a wide margin, and 10,000 values cost at most ~1 MiB of heap plus their strings,
 *   and ~20 MiB for zod's issues if every one of them is invalid. Big text stays possible: a string
 *   is one value whatever its length (bounded by MAX_BODY_BYTES).
 * - depth: nesting of arrays and objects. Legitimate bodies nest fewer than 10 levels; 64 (as .NET's
 *   System.Text.Json) keeps every recursive walk after the parse (validation, redaction, the 422's
 *   echo, serialisation) far from the stack's end.
 *
 * `replay_json` is one string value in its request; the trajectory inside it is parsed later, with
 * its own budget (a recorded session has ~20–100 values an event): REPLAY_JSON_LIMITS.
 *
 * The counter is hand-written: it is a pass over the text that allocates nothing (a string is skipped
 * with the native `indexOf`: 10 MiB of text costs under 1 % of its `JSON.parse`, the hot path's
 * message about a quarter), stops at the first value over the limit, and needs no tree. The
 * maintained streaming tokenizers measured against it (jsonc-parser's scanner, @streamparser/json's
 * tokenizer; scripts/bench-body-shape.ts) build a token or a string value for everything they pass:
 * 2–40 times its cost on small bodies, 60–1,000 times on text full of escaped quotes.
 */

export interface ShapeLimits {
  /** Objects, arrays, strings, numbers and literals (keys not counted). */
  values: number;
  /** Nesting of arrays and objects. */
  depth: number;
}

/** Every request body: REST, /trpc, WebSocket client frames. */
export const BODY_SHAPE_LIMITS: ShapeLimits = { values: 10_000, depth: 64 };
/** `replay_json`: a recorded trajectory (hundreds of events of tens of values each). */
export const REPLAY_JSON_LIMITS: ShapeLimits = { values: 250_000, depth: 64 };

/** Why a body was refused; `tooLarge`: over the limits (413), else not the format it claims to be. */
export interface ShapeRefusal {
  tooLarge: boolean;
  detail: string;
}

const rule = (l: ShapeLimits) =>
  `the limit is ${l.values} values (objects, arrays, strings, numbers, literals; keys not counted) nested at most ${l.depth} deep`;
const tooMany = (what: string, l: ShapeLimits, unit = 'JSON values'): ShapeRefusal => ({
  tooLarge: true,
  detail: `${what} has more than ${l.values} ${unit}: ${rule(l)}`,
});
const tooDeep = (what: string, l: ShapeLimits): ShapeRefusal => ({
  tooLarge: true,
  detail: `${what} nests arrays and objects more than ${l.depth} deep: ${rule(l)}`,
});
const malformed = (detail: string): ShapeRefusal => ({ tooLarge: false, detail });

// per nesting level: 1 for an object (its next string may be a key), 0 for an array; reused
// between calls (they are synchronous), grown for a deeper limit
let kinds = new Uint8Array(BODY_SHAPE_LIMITS.depth + 2);

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Null when `text` is within `limits`, otherwise why not (a sentence naming the limits, for a 413).
 * Malformed JSON is not this function's concern: the parse after it says where it breaks. What it
 * guarantees is that whatever the parse could build before failing is within the limits too.
 */
export function jsonShapeError(text: string, limits: ShapeLimits = BODY_SHAPE_LIMITS, what = 'Request body'): ShapeRefusal | null {
  if (kinds.length < limits.depth + 2) kinds = new Uint8Array(limits.depth + 2);
  const n = text.length;
  let values = 0;
  let depth = 0;
  // the next string is an object key (after `{` or a `,` inside an object)
  let keyNext = false;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    switch (c) {
      case 0x20:
      case 0x0a:
      case 0x0d:
      case 0x09:
      case 0x3a: // whitespace, ':'
        continue;
      case 0x2c: // ','
        keyNext = kinds[depth] === 1;
        continue;
      case 0x7b:
      case 0x5b: // '{', '['
        if (++values > limits.values) return tooMany(what, limits);
        if (++depth > limits.depth) return tooDeep(what, limits);
        kinds[depth] = c === 0x7b ? 1 : 0;
        keyNext = c === 0x7b;
        continue;
      case 0x7d:
      case 0x5d: // '}', ']'
        if (depth > 0) depth--;
        keyNext = false;
        continue;
      case QUOTE: {
        if (!keyNext && ++values > limits.values) return tooMany(what, limits);
        keyNext = false;
        // the closing quote is the next one not escaped: preceded by an even run of backslashes
        let q = i;
        for (;;) {
          q = text.indexOf('"', q + 1);
          if (q < 0) return null;
          let b = q - 1;
          while (text.charCodeAt(b) === BACKSLASH) b--;
          if ((q - 1 - b) % 2 === 0) break;
        }
        i = q;
        continue;
      }
      default: {
        // a number or literal (or junk the parse will refuse): one value up to the next delimiter
        if (++values > limits.values) return tooMany(what, limits);
        keyNext = false;
        while (i + 1 < n && !isDelimiter(text.charCodeAt(i + 1))) i++;
      }
    }
  }
  return null;
}

const isDelimiter = (c: number) =>
  c === 0x2c || c === 0x5d || c === 0x7d || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || c === 0x3a || c === QUOTE || c === 0x5b || c === 0x7b;

/**
 * The same limits for a msgpack client frame, plus what only this format needs: the frame must be
 * plain msgpack (no extension types: msgpackr would decode them into Sets, Errors, typed arrays,
 * BigInts…, none of which a message is) and complete (every declared item present: msgpackr
 * allocates an array of the declared length before reading it). Keys count like JSON's.
 */
export function msgpackShapeError(bytes: Uint8Array, limits: ShapeLimits = BODY_SHAPE_LIMITS, what = 'Frame'): ShapeRefusal | null {
  if (kinds.length < limits.depth + 2) kinds = new Uint8Array(limits.depth + 2);
  // items still to read at each level (maps count keys and values); level 0 is the frame's top
  const left: number[] = [Infinity];
  const n = bytes.length;
  let values = 0;
  let depth = 0;
  let outstanding = 0;
  let p = 0;
  while (p < n) {
    while (depth > 0 && left[depth] === 0) depth--;
    // in a map, the items at even positions from its end are keys
    const isKey = kinds[depth] === 1 && left[depth]! % 2 === 0;
    left[depth]!--;
    if (depth > 0) outstanding--;
    if (!isKey && ++values > limits.values) return tooMany(what, limits, 'msgpack values');
    const b = bytes[p++]!;
    let size = 0;
    let items = -1;
    let map = false;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) size = 0;
    else if (b <= 0x8f) (items = b & 0x0f), (map = true);
    else if (b <= 0x9f) items = b & 0x0f;
    else if (b <= 0xbf) size = b & 0x1f;
    else {
      switch (b) {
        case 0xc4:
        case 0xd9:
          size = bytes[p] ?? 0;
          p += 1;
          break; // bin8, str8
        case 0xc5:
        case 0xda:
          size = uint(bytes, p, 2);
          p += 2;
          break; // bin16, str16
        case 0xc6:
        case 0xdb:
          size = uint(bytes, p, 4);
          p += 4;
          break; // bin32, str32
        case 0xca:
          size = 4;
          break;
        case 0xcb:
          size = 8;
          break;
        case 0xcc:
        case 0xd0:
          size = 1;
          break;
        case 0xcd:
        case 0xd1:
          size = 2;
          break;
        case 0xce:
        case 0xd2:
          size = 4;
          break;
        case 0xcf:
        case 0xd3:
          size = 8;
          break;
        case 0xdc:
          items = uint(bytes, p, 2);
          p += 2;
          break;
        case 0xdd:
          items = uint(bytes, p, 4);
          p += 4;
          break;
        case 0xde:
          items = uint(bytes, p, 2);
          p += 2;
          map = true;
          break;
        case 0xdf:
          items = uint(bytes, p, 4);
          p += 4;
          map = true;
          break;
        default:
          return malformed(`${what} is not plain msgpack (byte 0x${b.toString(16)} at ${p - 1}: extension types are not accepted)`);
      }
    }
    p += size;
    if (items < 0) continue;
    if (depth + 1 > limits.depth) return tooDeep(what, limits);
    if (map) items *= 2;
    if (items === 0) continue;
    depth++;
    kinds[depth] = map ? 1 : 0;
    left[depth] = items;
    outstanding += items;
    // every declared item takes at least one byte
    if (outstanding > n - p) return malformed(`${what} is truncated: its arrays and maps declare more items than it has bytes`);
  }
  if (p > n || outstanding > 0) return malformed(`${what} is truncated`);
  return null;
}

function uint(bytes: Uint8Array, p: number, len: number): number {
  let v = 0;
  for (let k = 0; k < len; k++) v = v * 256 + (bytes[p + k] ?? 0);
  return v;
}
