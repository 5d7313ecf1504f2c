/**
 * OpenHands agent-server's conversation features (what `@openhands/typescript-client`'s
 * `RemoteConversation` calls beyond a session): fork, navigate (not offered: 501 with the reason),
 * the `/goal` loop, switching the LLM (an object, a named profile; ACP models are not Parley's),
 * the security analyzer, and the trajectory's ZIP (streamed over REST).
 */
import * as features from '../../conversation/agent-server-features.js';
import { trajectory } from '../../conversation/trajectory.js';
import { AgentServerSchemas as AS } from '../agent-server-schemas.js';
import { jsonOutput, mutation, query } from '../operation.js';
import { ApiSchemas as A } from '../schemas.js';

const ONE = '/api/conversations/{conversation_id}';
const TAG = 'Conversations';
const INFO = { response: 'ConversationInfo' };

export const agentServerFeatureOperations = {
  forkConversation: mutation({
    input: () => AS.ForkConversationInput,
    rest: { method: 'POST', path: `${ONE}/fork`, body: { field: 'request' }, query: true, status: 201, summary: 'Fork Conversation', tag: TAG, doc: INFO },
    handler: (c, i) =>
      features.fork({ conversations: c.conversations, forks: c.forks, extensions: c.server.extensions }, i.conversation_id, i.request, i.include_skills),
  }),
  navigateConversation: mutation({
    input: () => AS.NavigateConversationInput,
    rest: { method: 'POST', path: `${ONE}/navigate`, body: { field: 'request' }, query: true, summary: 'Navigate Conversation', tag: TAG, doc: INFO },
    handler: (c, i) => features.navigate(c, i.conversation_id),
  }),
  startGoal: mutation({
    input: () => AS.StartGoalInput,
    rest: { method: 'POST', path: `${ONE}/goal`, body: 'fields', summary: 'Start Goal In Conversation', tag: TAG },
    handler: (c, i) => c.service.startGoal(i.conversation_id, i.objective, i.max_iterations),
  }),
  stopGoal: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'POST', path: `${ONE}/goal/stop`, summary: 'Stop Goal In Conversation', tag: TAG },
    handler: (c, i) => c.service.stopGoal(i.conversation_id),
  }),
  resumeGoal: mutation({
    input: () => A.ConversationIdInput,
    rest: { method: 'POST', path: `${ONE}/goal/resume`, summary: 'Resume Goal In Conversation', tag: TAG },
    handler: (c, i) => c.service.resumeGoal(i.conversation_id),
  }),
  switchLlm: mutation({
    input: () => AS.SwitchLlmInput,
    rest: { method: 'POST', path: `${ONE}/switch_llm`, body: 'fields', summary: 'Switch Conversation LLM', tag: TAG },
    handler: (c, i) => features.switchLlm(c, i.conversation_id, i.llm),
  }),
  switchProfile: mutation({
    input: () => AS.SwitchProfileInput,
    rest: { method: 'POST', path: `${ONE}/switch_profile`, body: 'fields', summary: 'Switch Conversation Profile', tag: TAG },
    handler: (c, i) => features.switchProfile({ ...c, profiles: c.server.llmProfiles }, i.conversation_id, i.profile_name),
  }),
  switchAcpModel: mutation({
    input: () => AS.SwitchAcpModelInput,
    rest: { method: 'POST', path: `${ONE}/switch_acp_model`, body: 'fields', summary: 'Switch Conversation ACP Model', tag: TAG },
    handler: (c, i) => features.switchAcpModel(c, i.conversation_id),
  }),
  setSecurityAnalyzer: mutation({
    input: () => AS.SetSecurityAnalyzerInput,
    rest: { method: 'POST', path: `${ONE}/security_analyzer`, body: 'fields', summary: 'Set Conversation Security Analyzer', tag: TAG },
    handler: (c, i) => features.setSecurityAnalyzer(c, i.conversation_id, i.security_analyzer),
  }),
  /** REST streams the ZIP as it is made; tRPC answers it whole, as base64. */
  downloadTrajectory: jsonOutput(
    query({
      input: () => A.ConversationIdInput,
      rest: {
        method: 'GET',
        path: '/api/file/download-trajectory/{conversation_id}',
        summary: 'Download Trajectory',
        tag: 'Files',
        doc: { response: { type: 'string', format: 'binary', description: 'application/zip' } },
      },
      handler: (c, i) => trajectory(c, i.conversation_id),
    }),
    async (z) => ({ name: z.name, content_base64: (await z.collect()).toString('base64') }),
  ),
};
