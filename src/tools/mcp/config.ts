/**
 * The MCP configuration format lives with the stored settings (src/secrets/mcp-config.ts: the
 * settings keep the default MCP servers, below the tools); this path stays for the API's schemas
 * and the tests that import it here.
 */
export * from '../../secrets/mcp-config.js';
