/**
 * The settings forms' schemas (`/api/settings/agent-schema`, `/conversation-schema`) in OpenHands'
 * SettingsSchema shape: sections of fields, each with its key (dotted inside a section, as
 * `llm.model`), type, default, prominence and whether it is secret. They describe the settings Parley
 * keeps and uses (agent-settings.ts), and nothing else: a client renders a form of what works.
 */
import { CONVERSATION_SETTING_KEYS } from './agent-settings.js';

type ValueType = 'string' | 'integer' | 'number' | 'boolean' | 'array' | 'object';

interface Field {
  key: string;
  label: string;
  description: string;
  value_type: ValueType;
  default?: unknown;
  prominence: 'critical' | 'major' | 'minor';
  secret?: boolean;
  depends_on?: string[];
  choices?: { value: string | number | boolean; label: string }[];
}

function section(key: string, label: string, fields: Field[]) {
  return {
    key,
    label,
    variant: null,
    fields: fields.map((f) => ({
      key: f.key,
      label: f.label,
      description: f.description,
      section: key,
      section_label: label,
      value_type: f.value_type,
      default: f.default ?? null,
      prominence: f.prominence,
      depends_on: f.depends_on ?? [],
      secret: f.secret ?? false,
      choices: f.choices ?? [],
      variant: null,
    })),
  };
}

export function agentSettingsSchema() {
  return {
    model_name: 'AgentSettings',
    sections: [
      section('llm', 'LLM', [
        {
          key: 'llm.model',
          label: 'Model',
          description:
            'provider/model: openai/… (with a base URL: any OpenAI-compatible server) or anthropic/…; ' +
            'a bare claude-… name is Anthropic’s, any other bare name OpenAI’s.',
          value_type: 'string',
          prominence: 'critical',
        },
        {
          key: 'llm.api_key',
          label: 'API Key',
          description: 'Encrypted at rest; never shown again (reads answer **********).',
          value_type: 'string',
          prominence: 'critical',
          secret: true,
        },
        {
          key: 'llm.base_url',
          label: 'Base URL',
          description: 'An OpenAI-compatible server (http(s)://…/v1) for openai/… models, or another Anthropic endpoint.',
          value_type: 'string',
          prominence: 'major',
        },
      ]),
      section('mcp', 'MCP', [
        {
          key: 'mcp_config',
          label: 'MCP Servers',
          description: 'Named MCP servers (stdio, or remote with an optional bearer credential); the enabled ones join every new conversation.',
          value_type: 'object',
          default: {},
          prominence: 'major',
        },
      ]),
    ],
  };
}

export function conversationSettingsSchema() {
  const fields: Record<(typeof CONVERSATION_SETTING_KEYS)[number], Field> = {
    max_iterations: {
      key: 'max_iterations',
      label: 'Max Iterations',
      description: 'Steps an agent may take in one run before it stops.',
      value_type: 'integer',
      default: 500,
      prominence: 'major',
    },
    confirmation_mode: {
      key: 'confirmation_mode',
      label: 'Confirmation Mode',
      description: "Wait for the user's confirmation before each action runs.",
      value_type: 'boolean',
      default: false,
      prominence: 'major',
    },
    security_analyzer: {
      key: 'security_analyzer',
      label: 'Security Analyzer',
      description: 'The analyzer that rates the risk of actions (with confirmation mode: only risky ones wait).',
      value_type: 'string',
      default: null,
      prominence: 'minor',
      depends_on: ['confirmation_mode'],
    },
  };
  return {
    model_name: 'ConversationSettings',
    sections: [
      section(
        'general',
        'General',
        CONVERSATION_SETTING_KEYS.map((k) => fields[k]),
      ),
    ],
  };
}
