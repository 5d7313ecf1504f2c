/**
 * Conversion of an MCP `tools/call` result into observation content, and of a tool's input
 * schema into the JSON Schema offered to the LLM.
 */
import type { MCPObservation } from '../../events/tool-catalog.js';
import type { ObservationContent } from '../types.js';

export type { MCPObservation };

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

function base64Bytes(b64: string): number {
  const pad = b64.endsWith('==') ? 2 : b64.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((b64.length * 3) / 4) - pad);
}

/**
 * One MCP content block → observation content. Text stays text (redacted); images become
 * `data:` URLs; audio, resource links and embedded resources are described as text (embedded
 * text resources carry their text; embedded image blobs become images).
 */
function convertContentBlock(block: unknown, redact: (t: string) => string): ObservationContent {
  if (!isObj(block)) return { type: 'text', text: redact(JSON.stringify(block) ?? String(block)) };
  switch (block.type) {
    case 'text':
      return { type: 'text', text: redact(str(block.text) ?? '') };
    case 'image': {
      const mime = str(block.mimeType) ?? 'image/png';
      return { type: 'image', image_urls: [`data:${mime};base64,${str(block.data) ?? ''}`] };
    }
    case 'audio': {
      const data = str(block.data) ?? '';
      return { type: 'text', text: `[audio content: ${str(block.mimeType) ?? 'unknown type'}, ${base64Bytes(data)} bytes, not shown]` };
    }
    case 'resource_link': {
      const parts = [`[resource link] ${str(block.name) ?? ''} ${str(block.uri) ?? ''}`.trim()];
      if (str(block.mimeType)) parts.push(`type: ${block.mimeType}`);
      if (str(block.description)) parts.push(`description: ${block.description}`);
      return { type: 'text', text: redact(parts.join('\n')) };
    }
    case 'resource': {
      const r = isObj(block.resource) ? block.resource : {};
      const uri = str(r.uri) ?? '';
      const mime = str(r.mimeType);
      if (typeof r.text === 'string') {
        return { type: 'text', text: redact(`[resource ${uri}${mime ? ` (${mime})` : ''}]\n${r.text}`) };
      }
      const blob = str(r.blob) ?? '';
      if (mime?.startsWith('image/')) return { type: 'image', image_urls: [`data:${mime};base64,${blob}`] };
      return { type: 'text', text: redact(`[binary resource ${uri} (${mime ?? 'unknown type'}), ${base64Bytes(blob)} bytes, not shown]`) };
    }
    default:
      return { type: 'text', text: redact(JSON.stringify(block)) };
  }
}

/** The content of a call result (also the legacy `toolResult` form). */
export function convertCallResult(result: unknown, redact: (t: string) => string): { content: ObservationContent[]; isError: boolean } {
  const r = isObj(result) ? result : {};
  const content: ObservationContent[] = [];
  if (Array.isArray(r.content)) {
    for (const block of r.content) content.push(convertContentBlock(block, redact));
  } else if ('toolResult' in r) {
    content.push({ type: 'text', text: redact(JSON.stringify(r.toolResult)) });
  }
  if (content.length === 0 && r.structuredContent !== undefined) {
    content.push({ type: 'text', text: redact(JSON.stringify(r.structuredContent)) });
  }
  return { content, isError: r.isError === true };
}

/**
 * The tool's `inputSchema` as offered to the LLM: a shallow copy without `$schema`, with
 * `type: "object"` and a `properties` object guaranteed (some providers reject objects without).
 */
export function normalizeInputSchema(input: unknown): Record<string, unknown> {
  const s: Obj = isObj(input) ? { ...input } : {};
  delete s.$schema;
  if (s.type === undefined) s.type = 'object';
  if (s.type === 'object' && !isObj(s.properties)) s.properties = {};
  return s;
}
