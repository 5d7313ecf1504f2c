/**
 * Content items as events carry them (OpenHands' TextContent / ImageContent): message content,
 * an action's thought, an observation's output. The request schemas in src/api/ are stricter
 * (no unknown fields, defaults filled in); these describe what is stored and sent.
 */
import * as z from 'zod';

export const TextContentItem = z.object({
  type: z.literal('text'),
  text: z.string(),
  cache_prompt: z.boolean().optional(),
});
const ImageContentItem = z.object({
  type: z.literal('image'),
  image_urls: z.array(z.string()),
  cache_prompt: z.boolean().optional(),
});
export const ContentItem = z.discriminatedUnion('type', [TextContentItem, ImageContentItem]);

export type TextContentItem = z.output<typeof TextContentItem>;
type ImageContentItem = z.output<typeof ImageContentItem>;
export type ContentItem = z.output<typeof ContentItem>;

/** The fields every observation has; a tool adds its own beside them (`observationSchema`). */
const observationBase = {
  content: z.array(ContentItem),
  is_error: z.boolean(),
};

/** An observation kind: `kind` plus the common fields plus the tool's own. */
export function observationSchema<K extends string, S extends z.ZodRawShape>(kind: K, fields: S) {
  return z.object({ kind: z.literal(kind), ...observationBase, ...fields }).meta({ id: kind });
}

/** An action kind: `kind` plus the tool's parameters (OpenHands' `ActionEvent.action`). */
export function actionSchema<K extends string, S extends z.ZodRawShape>(kind: K, parameters: z.ZodObject<S>) {
  return parameters.extend({ kind: z.literal(kind) }).meta({ id: kind });
}
