/**
 * A stdio MCP server for the tests: `node --import tsx test/support/mcp-servers/stdio-server.ts [name]`
 * (the tests run it built: test/support/helper-programs.ts).
 * Offers the tools of ./tools.ts, including `crash`.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { buildTestServer } from './tools.js';

const name = process.argv[2] ?? 'stdio-test';
const server = buildTestServer({ name, allowCrash: true });
await server.connect(new StdioServerTransport());
process.stdin.on('end', () => process.exit(0));
