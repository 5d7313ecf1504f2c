/**
 * A conversation's workspace from outside the agent (OpenHands agent-server's side channels): bash
 * commands, file upload and download, git changes and diff, and the tool names. No conversation in
 * the path: the core's locator finds it from `conversation_id`, the path or the cwd.
 */
import { TOOL_NAMES } from '../../conversation/side-channels.js';
import { AgentServerSchemas as AS } from '../agent-server-schemas.js';
import { jsonInput, jsonOutput, mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';

const BASH_EVENTS = '/api/bash/bash_events';
/** A workspace path (and conversation), as the file and changes routes document it (`ref` is the diff's). */
const PATH_QUERY = () => AS.WorkspacePathQuery.omit({ ref: true });

/**
 * The workspace's files for a browser to show (a page the agent made, with its scripts and images),
 * at the workspace's root (its index.html) and below it. REST answers the bytes raw, inline, each
 * page in a sandboxed origin of its own; tRPC as base64.
 */
const serveWorkspaceFile = (path: string, summary: string) =>
  jsonOutput(
    query({
      input: () => AS.ServeWorkspaceFileInput,
      rest: { method: 'GET', path, tail: true, workspaceSession: true, summary, tag: 'Files', doc: { response: { type: 'string', format: 'binary' } } },
      handler: (c, i) => c.sideChannels.serveWorkspaceFile(i),
    }),
    async (f) => ({ name: f.name, content_base64: (await f.collect()).toString('base64') }),
  );

export const workspaceOperations = {
  executeBash: mutation({
    input: () => AS.ExecuteBashRequest,
    rest: {
      method: 'POST',
      path: '/api/bash/execute_bash_command',
      body: 'input',
      summary: 'Execute Bash Command',
      tag: 'Bash',
      doc: { response: { type: 'object', description: 'BashOutput' } },
    },
    handler: (c, i) => c.sideChannels.executeBash(i),
  }),
  startBash: mutation({
    input: () => AS.ExecuteBashRequest,
    rest: {
      method: 'POST',
      path: '/api/bash/start_bash_command',
      body: 'input',
      summary: 'Start Bash Command',
      tag: 'Bash',
      doc: { response: { type: 'object', description: 'BashCommand' } },
    },
    handler: (c, i) => c.sideChannels.startBash(i),
  }),
  searchBashEvents: query({
    input: () => AS.BashEventSearchQuery,
    rest: {
      method: 'GET',
      path: `${BASH_EVENTS}/search`,
      query: true,
      summary: 'Search Bash Events',
      tag: 'Bash',
      doc: { response: { type: 'object', description: '{items, next_page_id}' } },
    },
    handler: async (c, i) => c.sideChannels.searchBash(i),
  }),
  getBashEvent: query({
    input: () => AS.BashEventIdInput,
    rest: { method: 'GET', path: `${BASH_EVENTS}/{event_id}`, summary: 'Get Bash Event', tag: 'Bash' },
    handler: async (c, i) => c.sideChannels.getBashEvent(i.event_id),
  }),
  /** The client's batch: a JSON array of ids as the body of a GET. */
  batchGetBashEvents: query({
    input: () => AS.BashEventIdsInput,
    rest: { method: 'GET', path: BASH_EVENTS, body: 'input', summary: 'Batch Get Bash Events', tag: 'Bash' },
    handler: async (c, i) => i.map((id) => c.sideChannels.bash.get(id)),
  }),
  clearBashEvents: mutation({
    input: () => A.NoInput,
    rest: { method: 'DELETE', path: BASH_EVENTS, summary: 'Clear Bash Events', tag: 'Bash' },
    handler: async (c) => c.sideChannels.bash.clear(),
  }),
  /** REST reads the bytes from a multipart body; tRPC takes them as base64. */
  uploadFile: jsonInput(
    mutation({
      input: () => AS.WorkspaceUploadInput,
      rest: {
        method: 'POST',
        path: '/api/file/upload',
        body: { field: 'content', multipart: 'file' },
        query: true,
        byConversationKey: true,
        summary: 'Upload File',
        tag: 'Files',
      },
      handler: (c, i) => c.sideChannels.upload(i),
    }),
    () => AS.WorkspaceUploadJsonInput,
  ),
  /** REST answers the bytes raw; tRPC as base64. */
  downloadFile: jsonOutput(
    query({
      input: () => AS.WorkspacePathQuery,
      rest: {
        method: 'GET',
        path: '/api/file/download',
        query: true,
        byConversationKey: true,
        summary: 'Download File',
        tag: 'Files',
        doc: { query: PATH_QUERY, response: { type: 'string', format: 'binary' } },
      },
      handler: (c, i) => c.sideChannels.download(i),
    }),
    async (f) => ({ name: f.name, content_base64: (await f.collect()).toString('base64') }),
  ),
  serveWorkspaceRoot: serveWorkspaceFile('/api/conversations/{conversation_id}/workspace', 'Serve Workspace Root'),
  serveWorkspaceFile: serveWorkspaceFile('/api/conversations/{conversation_id}/workspace/{file_path}', 'Serve Workspace File'),
  gitChanges: query({
    input: () => AS.WorkspacePathQuery,
    rest: {
      method: 'GET',
      path: '/api/git/changes',
      query: true,
      byConversationKey: true,
      summary: 'Git Changes',
      tag: 'Git',
      doc: {
        query: PATH_QUERY,
        response: {
          type: 'array',
          items: { type: 'object', properties: { path: { type: 'string' }, status: { enum: ['ADDED', 'UPDATED', 'DELETED', 'MOVED'] } } },
        },
      },
    },
    handler: (c, i) => c.sideChannels.gitChanges(i),
  }),
  gitDiff: query({
    input: () => AS.WorkspacePathQuery,
    rest: {
      method: 'GET',
      path: '/api/git/diff',
      query: true,
      byConversationKey: true,
      summary: 'Git Diff',
      tag: 'Git',
      doc: { response: { type: 'object', properties: { original: { type: ['string', 'null'] }, modified: { type: ['string', 'null'] } } } },
    },
    handler: (c, i) => c.sideChannels.gitDiff(i),
  }),
  listTools: query({
    input: () => A.NoInput,
    rest: { method: 'GET', path: '/api/tools', summary: 'List Tools', tag: 'Tools', doc: { response: { type: 'array', items: { type: 'string' } } } },
    handler: async () => TOOL_NAMES,
  }),
};
