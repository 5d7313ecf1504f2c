/**
 * What a run offers the LLM of its tools, made once per list of tools instead of at every run: the
 * JSON Schema of each (from its zod parameters: `z.toJSONSchema` of the five built-in tools was
 * ~0.7 ms of a text turn), with the `security_risk` argument the LLM security analyzer asks for, the
 * list the LLM client is handed (the same array every run, so the client's request body and the
 * provider's tool conversion, cached by the list's identity, are made once too), and the definitions
 * the `SystemPromptEvent` records.
 *
 * Lists are found by their tools' identities, in order (a trie of weak maps, one per analyzer choice):
 * the built-in tools are the same objects for the daemon's life; a conversation's MCP tools make their
 * own lists, which go when their tools do.
 */
import * as z from 'zod';
import type { LlmToolSpec } from '../llm/types.js';
import type { Tool } from '../tools/types.js';
import { withRiskArgument } from './security-analyzer.js';

/** A tool that changes nothing (its risk is never asked for, and a lone call of it needs no confirmation). */
export const readOnly = (t: Tool) => t.actionKind === 'FinishAction' || t.actionKind === 'ThinkAction';

/** A `SystemPromptEvent`'s description of one tool. */
interface ToolDefinition {
  kind: string;
  name: string;
  title: string;
  description: string;
  parameters: Record<string, unknown>;
  action_type: string;
}

export interface ToolSet {
  tools: Tool[];
  byName: Map<string, Tool>;
  /** The same array for the same tools: the LLM client caches what it makes of it by identity. */
  specs: LlmToolSpec[];
  specsJson: string;
  definitions: ToolDefinition[];
}

interface Node {
  next: WeakMap<Tool, Node>;
  set: ToolSet | null;
}

export class ToolSets {
  private readonly specOf = new WeakMap<Tool, LlmToolSpec>();
  private readonly riskSpecOf = new WeakMap<Tool, LlmToolSpec>();
  private readonly roots = { plain: this.node(), risk: this.node() };

  /** The set of these tools, in this order (made the first time); `risk`: each one that can change something takes a `security_risk`. */
  of(tools: Tool[], risk: boolean): ToolSet {
    let node = risk ? this.roots.risk : this.roots.plain;
    for (const t of tools) {
      let next = node.next.get(t);
      if (!next) node.next.set(t, (next = this.node()));
      node = next;
    }
    node.set ??= this.make(tools, risk);
    return node.set;
  }

  private node(): Node {
    return { next: new WeakMap(), set: null };
  }

  private make(tools: Tool[], risk: boolean): ToolSet {
    const specs = tools.map((t) => (risk && !readOnly(t) ? this.riskSpec(t) : this.spec(t)));
    return {
      tools,
      byName: new Map(tools.map((t) => [t.name, t])),
      specs,
      specsJson: JSON.stringify(specs),
      definitions: tools.map((t, i) => ({
        kind: t.kind,
        name: t.name,
        title: t.name,
        description: t.description,
        parameters: specs[i]!.inputSchema,
        action_type: t.actionKind,
      })),
    };
  }

  private riskSpec(t: Tool): LlmToolSpec {
    let spec = this.riskSpecOf.get(t);
    if (!spec) {
      const plain = this.spec(t);
      spec = { ...plain, inputSchema: withRiskArgument(plain.inputSchema) };
      this.riskSpecOf.set(t, spec);
    }
    return spec;
  }

  private spec(t: Tool): LlmToolSpec {
    let spec = this.specOf.get(t);
    if (!spec) {
      const inputSchema =
        t.jsonSchema ?? stripSchemaMeta(z.toJSONSchema(t.parameters as z.ZodType, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>);
      spec = { name: t.name, description: t.description, inputSchema };
      this.specOf.set(t, spec);
    }
    return spec;
  }
}

function stripSchemaMeta(schema: Record<string, unknown>): Record<string, unknown> {
  const { $schema: _s, ...rest } = schema;
  return rest;
}
