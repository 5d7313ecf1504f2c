/**
 * MCP layer: the MCP servers configured for a conversation, offered to its agent as tools.
 * See manager.ts (lifecycle), naming.ts (tool/server naming rule), config.ts (config + secrets).
 */
export {
  MCP_SECRET_PLACEHOLDER,
  mcpSecretValues,
  mcpUrlKey,
  mergeMcpConfig,
  redactMcpConfig,
  type McpConfig,
  type McpShttpServerConfig,
  type McpSseServerConfig,
  type McpStdioServerConfig,
} from './config.js';
export {
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  McpManager,
  describeError,
  type McpEvent,
  type McpManagerOptions,
  type McpObservation,
  type McpServerState,
  type McpServerStatus,
  type McpTool,
  type McpTransportKind,
} from './manager.js';
export {
  DEFAULT_RESERVED_TOOL_NAMES,
  MAX_TOOL_NAME_LENGTH,
  assignServerNames,
  assignToolNames,
  sanitizeName,
  serverNameFromUrl,
} from './naming.js';
