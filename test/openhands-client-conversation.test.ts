/**
 * OpenHands' own TypeScript client (@openhands/typescript-client, pinned) drives the agent server's
 * conversation features against a real daemon and the scripted LLM, through `RemoteConversation`:
 * switching the LLM (an object, a named profile) in the middle of a run, the LLM security analyzer
 * holding a high-risk action for confirmation, the `/goal` loop (its judge, re-prompts, cap, stop
 * and resume), the trajectory's ZIP (unzipped), and the rules every route keeps. What the daemon did
 * is judged from what the scripted LLM received, from the workspace on the host and from the files
 * in DATA_DIR (keys never in clear). Fork is test/openhands-client-fork.test.ts.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { unzipSync } from 'fflate';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { startScriptedLlm, type ScriptedLlm, type ScriptedRequest } from './support/scripted-llm.js';

// the client's ESM build calls require('ws') to open its socket (a client bug, worked around as test/openhands-client.test.ts does)
(globalThis as { require?: NodeJS.Require }).require = createRequire(import.meta.url);
const OH = await import('@openhands/typescript-client');
const C = await import('@openhands/typescript-client/clients');
const { Agent, Conversation, Workspace } = OH;

const SESSION_KEY = 'conv-features-key-0123456';
const KEY_A = 'sk-LLM-A-CANARY-11111';
const KEY_B = 'sk-LLM-B-CANARY-22222';
const KEY_P = 'sk-PROFILE-CANARY-33333';
const SECRET = 'conv-secret-CANARY-44444';
const CANARIES = [KEY_A, KEY_B, KEY_P, SECRET];
const H = { 'x-session-api-key': SESSION_KEY };

let d: DaemonHandle;
let llmA: ScriptedLlm;
let llmB: ScriptedLlm;
let llmP: ScriptedLlm;

before(async () => {
  llmA = await startScriptedLlm([], { requireApiKey: KEY_A });
  llmB = await startScriptedLlm([], { requireApiKey: KEY_B });
  llmP = await startScriptedLlm([], { requireApiKey: KEY_P });
  d = await startDaemon({ SESSION_API_KEY: SESSION_KEY });
});
after(async () => {
  await d?.stop();
  for (const l of [llmA, llmB, llmP]) await l?.close();
  if (!d) return;
  for (const c of CANARIES) assert.ok(!d.output.some((l) => l.includes(c)), `the canary ${c} is in no log line`);
  // keys and secrets are sealed at rest: no file of DATA_DIR but the workspaces holds one in clear
  for (const f of filesUnder(d.dataDir).filter((f) => !f.includes(`${path.sep}workspaces${path.sep}`))) {
    const text = fs.readFileSync(f).toString('latin1');
    for (const c of CANARIES) assert.ok(!text.includes(c), `${c} is not in clear in ${f}`);
  }
});

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...filesUnder(p));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

const agentA = () => new Agent({ llm: { model: 'openai/model-a', api_key: KEY_A, base_url: llmA.url } as never });
const workspace = (dir: string) => new Workspace({ host: d.url, workingDir: dir, apiKey: SESSION_KEY });
const opts = () => ({ host: d.url, apiKey: SESSION_KEY });

/** A conversation started through the client (its LLM is A), closed after the test. */
async function started(t: { after(fn: () => unknown): void }, dir: string) {
  const conv = new Conversation(agentA(), workspace(dir));
  t.after(() => conv.close());
  await conv.start();
  return conv;
}
const statusOf = async (conv: InstanceType<typeof Conversation>) => (await conv.state.refresh()).execution_status;
const settled = (conv: InstanceType<typeof Conversation>, s: string) => waitFor(async () => (await statusOf(conv)) === s, s, 60_000);
const hostWorkspace = (id: string) => path.join(d.dataDir, 'workspaces', id.replace(/-/g, ''));
/** The text of every message of a request to the LLM. */
const said = (r: ScriptedRequest) => JSON.stringify(r.body.messages);
const rejectsWith = (s: number, detail?: RegExp) => (e: any) => e.status === s && (!detail || detail.test(JSON.stringify(e.response)));

describe('switching the LLM through the client', { timeout: 180_000 }, () => {
  test('switchLlm during a run: the next LLM request goes to the new model, server and key, with the history; the info shows it, never the key', async (t) => {
    const conv = await started(t, '/workspace/switch');
    const fromA = llmA.requests.length;
    llmA.push(async () => {
      // the switch lands while the run waits for this answer: the run's next request must use it
      await conv.switchLlm({ model: 'openai/model-b', api_key: KEY_B, base_url: llmB.url } as never);
      return { text: 'Writing.', toolCalls: [{ name: 'terminal', arguments: { command: 'echo one > one.txt' } }] };
    });
    llmB.push({ toolCalls: [{ name: 'finish', arguments: { message: 'finished on B' } }] });
    await conv.sendMessage('the first task');
    await conv.run();
    await settled(conv, 'finished');
    assert.equal(llmA.requests.length - fromA, 1, 'A answered the first step only');
    const [b] = llmB.requests;
    assert.ok(b, 'B received the next request');
    assert.equal(b.body.model, 'model-b');
    assert.equal(b.apiKey, KEY_B);
    assert.match(said(b), /the first task/, 'the history is kept');
    assert.match(said(b), /echo one > one\.txt/);
    assert.equal(fs.readFileSync(path.join(hostWorkspace(conv.id), 'one.txt'), 'utf8'), 'one\n');
    const info: any = await conv.state.refresh();
    assert.deepEqual([info.agent.llm.model, info.agent.llm.base_url, info.agent.llm.api_key], ['openai/model-b', llmB.url, '**********']);
    const raw = await d.req('GET', `/api/conversations/${conv.id}`, undefined, H);
    assert.ok(!raw.text.includes(KEY_B) && !raw.text.includes(KEY_A), 'no key is shown');
    assert.equal(await conv.getAgentFinalResponse(), 'finished on B');

    // sent back masked, as the info shows it: the key it has is kept
    await conv.switchLlm({ ...info.agent.llm, model: 'openai/model-b2' });
    llmB.push({ text: 'still B' });
    const n = llmB.requests.length;
    await conv.sendMessage('again');
    await conv.run();
    await settled(conv, 'finished');
    assert.deepEqual([llmB.requests[n]!.body.model, llmB.requests[n]!.apiKey], ['model-b2', KEY_B]);

    await assert.rejects(conv.switchLlm({ model: 'bedrock/not-runnable' } as never), rejectsWith(422, /llm/));
  });

  test("switchProfile: the profile's model, server and key run the next request; an unknown profile is a 404", async (t) => {
    await new C.ProfilesClient(opts()).saveProfile('cheap-one', { llm: { model: 'openai/model-p', api_key: KEY_P, base_url: llmP.url } } as never);
    const conv = await started(t, '/workspace/profile');
    await conv.switchProfile('cheap-one');
    const info: any = await conv.state.refresh();
    assert.deepEqual([info.agent.llm.model, info.agent.llm.base_url, info.agent.llm.api_key], ['openai/model-p', llmP.url, '**********']);
    llmP.push({ text: 'from the profile' });
    await conv.sendMessage('hello profile');
    await conv.run();
    await settled(conv, 'finished');
    const last = llmP.requests[llmP.requests.length - 1]!;
    assert.deepEqual([last.body.model, last.apiKey], ['model-p', KEY_P]);
    await assert.rejects(conv.switchProfile('no-such-profile'), rejectsWith(404, /no-such-profile/));
    await assert.rejects(new C.ConversationClient(opts()).switchProfile('00000000-0000-4000-8000-000000000001', 'cheap-one'), rejectsWith(404));
  });
});

describe('a conversation started from an agent profile', { timeout: 180_000 }, () => {
  test("agent_profile_id: the profile's LLM profile runs, its MCP servers are the conversation's; the provenance is shown; 404 and 422", async (t) => {
    await new C.ProfilesClient(opts()).saveProfile('launch-llm', { llm: { model: 'openai/model-launch', api_key: KEY_P, base_url: llmP.url } } as never);
    const settings = new C.SettingsClient(opts());
    await settings.createMcpServer('picked', { command: 'true' } as never);
    await settings.createMcpServer('other', { command: 'true' } as never);
    t.after(async () => {
      await settings.deleteMcpServer('picked');
      await settings.deleteMcpServer('other');
    });
    const profiles = new C.AgentProfilesClient(opts());
    await profiles.saveAgentProfile('launcher', { llm_profile_ref: 'launch-llm', mcp_server_refs: ['picked'] } as never);
    const profile: any = ((await profiles.getAgentProfile('launcher')) as any).profile;
    // the client always sends an agent: the profile's create is raw, the conversation is then the client's
    const r = await d.req('POST', '/api/conversations', { agent_profile_id: profile.id, workspace: { working_dir: '/workspace/launched' } }, H);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.body.launched_profile, { profile_id: profile.id, revision: profile.revision });
    assert.deepEqual([r.body.agent.llm.model, r.body.agent.llm.api_key], ['openai/model-launch', '**********']);
    assert.deepEqual(
      r.body.mcp_config.stdio_servers.map((x: any) => x.name),
      ['picked'],
    );
    const conv = new Conversation(r.body.agent, workspace('/workspace/launched'), { conversationId: r.body.id } as never);
    t.after(() => conv.close());
    await conv.start();
    llmP.push({ text: 'launched' });
    await conv.sendMessage('hello from a profile');
    await conv.run();
    await settled(conv, 'finished');
    const last = llmP.requests[llmP.requests.length - 1]!;
    assert.deepEqual([last.body.model, last.apiKey], ['model-launch', KEY_P]);

    const unknown = await d.req(
      'POST',
      '/api/conversations',
      { agent_profile_id: '00000000-0000-4000-8000-0000000000aa', workspace: { working_dir: '/w' } },
      H,
    );
    assert.equal(unknown.status, 404, unknown.text);
    await profiles.saveAgentProfile('dangling', { llm_profile_ref: 'launch-llm', mcp_server_refs: ['gone'] } as never);
    const dangling: any = ((await profiles.getAgentProfile('dangling')) as any).profile;
    const bad = await d.req('POST', '/api/conversations', { agent_profile_id: dangling.id, workspace: { working_dir: '/w' } }, H);
    assert.equal(bad.status, 422, bad.text);
    assert.deepEqual(bad.body.detail[0].loc, ['body', 'agent_profile_id']);
    assert.match(bad.body.detail[0].msg, /MCP server 'gone' does not exist/);
    const both = await d.req('POST', '/api/conversations', { agent_profile_id: profile.id, agent: { kind: 'Agent' }, workspace: { working_dir: '/w' } }, H);
    assert.equal(both.status, 422, both.text);
  });
});

describe("the agent is given the project's and the user's skills", { timeout: 180_000 }, () => {
  test('project AgentSkills are listed (read on demand), always-on skills and installed ones given, knowledge when a message says its trigger', async (t) => {
    const conv = await started(t, '/workspace/skills');
    const sh = async (command: string) => {
      const r = await d.req('POST', '/api/bash/execute_bash_command', { command, conversation_id: conv.id }, H);
      assert.equal(r.body.exit_code, 0, r.text);
    };
    await sh(
      [
        'mkdir -p .agents/skills/deploy-skill .openhands/skills mine',
        'printf -- "---\\nname: deploy-skill\\ndescription: How to deploy the app.\\n---\\nDEPLOY-BODY-NOT-INLINED\\n" > .agents/skills/deploy-skill/SKILL.md',
        'printf -- "Always run the linter (ALWAYS-ON-SKILL).\\n" > .openhands/skills/lint.md',
        'printf -- "---\\ntriggers: [banana]\\n---\\nBananas are yellow (KNOWLEDGE-SKILL).\\n" > .openhands/skills/fruit.md',
        'printf -- "---\\nname: user-skill\\ndescription: mine\\n---\\nThe user likes tabs (INSTALLED-SKILL).\\n" > mine/SKILL.md',
      ].join(' && '),
    );
    const sk = new C.SkillsClient(opts());
    await sk.installSkill({ source: '/workspace/skills/mine' });
    t.after(() => sk.uninstallSkill('user-skill'));
    const from = llmA.requests.length;
    llmA.push({ text: 'noted' }, { text: 'yellow' });
    await conv.sendMessage('hello');
    await conv.run();
    await settled(conv, 'finished');
    const system = JSON.stringify(llmA.requests[from]!.body.messages[0]);
    assert.match(system, /deploy-skill: How to deploy the app\. \(read [^)]*\.agents\/skills\/deploy-skill\/SKILL\.md\)/);
    assert.doesNotMatch(system, /DEPLOY-BODY-NOT-INLINED/, "an AgentSkills skill's body is read on demand");
    assert.match(system, /ALWAYS-ON-SKILL/);
    assert.match(system, /INSTALLED-SKILL/);
    assert.doesNotMatch(system, /KNOWLEDGE-SKILL/, 'knowledge waits for its trigger');
    await conv.sendMessage('what colour is a banana?');
    await conv.run();
    await settled(conv, 'finished');
    assert.match(JSON.stringify(llmA.requests[from + 1]!.body.messages[0]), /KNOWLEDGE-SKILL/);
    const forked = await d.req('POST', `/api/conversations/${conv.id}/fork?include_skills=true`, {}, H);
    const names = forked.body.agent.agent_context.skills.map((x: any) => x.name);
    for (const n of ['deploy-skill', 'user-skill']) assert.ok(names.includes(n), `${n} in ${names}`);
  });
});

describe('the LLM security analyzer through the client', { timeout: 180_000 }, () => {
  test('ConfirmRisky with the LLM analyzer: a LOW action runs, a HIGH one waits for confirmation; the risk is offered, recorded and shown', async (t) => {
    const conv = await started(t, '/workspace/risky');
    const ws = hostWorkspace(conv.id);
    await conv.setConfirmationPolicy({ kind: 'ConfirmRisky' } as never);
    await conv.setSecurityAnalyzer({ kind: 'LLMSecurityAnalyzer' } as never);
    const info: any = await conv.state.refresh();
    assert.deepEqual(info.security_analyzer, { kind: 'LLMSecurityAnalyzer' });
    assert.deepEqual(info.confirmation_policy, { kind: 'ConfirmRisky', confirm_unknown: true, threshold: 'HIGH' });

    const from = llmA.requests.length;
    llmA.push(
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo low > low.txt', security_risk: 'LOW' } }] },
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo high > high.txt', security_risk: 'HIGH' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'both done' } }] },
    );
    await conv.sendMessage('write low.txt then high.txt');
    await conv.run();
    await settled(conv, 'waiting_for_confirmation');
    assert.equal(fs.readFileSync(path.join(ws, 'low.txt'), 'utf8'), 'low\n', 'the low-risk action ran');
    assert.equal(fs.existsSync(path.join(ws, 'high.txt')), false, 'the high-risk action waits');
    const actions: any[] = (await conv.state.events.search({ kind: 'ActionEvent' } as never)).items;
    assert.deepEqual(
      actions.map((a) => a.security_risk),
      ['LOW', 'HIGH'],
    );
    assert.ok(
      actions.every((a) => a.action && !('security_risk' in a.action)),
      'the tool never sees the risk',
    );
    // what the model was offered: the risk on every tool that changes something, not on finish or think
    const first = llmA.requests[from]!.body;
    const toolSchema = (name: string) => first.tools.find((x: any) => x.function.name === name).function.parameters;
    assert.deepEqual(toolSchema('terminal').properties.security_risk.enum, ['LOW', 'MEDIUM', 'HIGH']);
    assert.ok(toolSchema('terminal').required.includes('security_risk'));
    assert.equal(toolSchema('finish').properties.security_risk, undefined);
    assert.match(JSON.stringify(first.messages[0]), /security_risk/, 'the system prompt explains it');

    await conv.sendConfirmationResponse(true);
    await settled(conv, 'finished');
    assert.equal(fs.readFileSync(path.join(ws, 'high.txt'), 'utf8'), 'high\n');

    // without the analyzer the model's LOW means nothing: ConfirmRisky confirms the unknown risk
    await conv.setSecurityAnalyzer(null as never);
    assert.equal(((await conv.state.refresh()) as any).security_analyzer, null);
    llmA.push({ toolCalls: [{ name: 'terminal', arguments: { command: 'echo unknown > unknown.txt', security_risk: 'LOW' } }] });
    await conv.sendMessage('write unknown.txt');
    await conv.run();
    await settled(conv, 'waiting_for_confirmation');
    assert.equal(fs.existsSync(path.join(ws, 'unknown.txt')), false);
    await conv.sendConfirmationResponse(false, 'no');
    await settled(conv, 'idle');
  });

  test('the other analyzers are a 501 with the reason; a made-up kind is a 422; an unknown conversation a 404', async (t) => {
    const conv = await started(t, '/workspace/analyzers');
    await assert.rejects(conv.setSecurityAnalyzer({ kind: 'GraySwanAnalyzer' } as never), rejectsWith(501, /LLMSecurityAnalyzer/));
    await assert.rejects(conv.setSecurityAnalyzer({ kind: 'Nope' } as never), rejectsWith(422, /security_analyzer/));
    // the generated client's kind names the same analyzer
    await conv.setSecurityAnalyzer({ kind: 'openhands__sdk__security__llm_analyzer__LLMSecurityAnalyzer-Input__1' } as never);
    assert.deepEqual(((await conv.state.refresh()) as any).security_analyzer, { kind: 'LLMSecurityAnalyzer' });
    const missing = '00000000-0000-4000-8000-000000000002';
    await assert.rejects(new C.ConversationClient(opts()).setSecurityAnalyzer(missing, null), rejectsWith(404));
  });
});

/** A judge's answer (the judge is the conversation's LLM, asked without tools). */
const verdict = (complete: boolean, missing = '') => ({ text: JSON.stringify({ score: complete ? 1 : 0.4, complete, missing }) });
const isJudge = (r: ScriptedRequest) => !r.body.tools?.length && /audit whether an AI software agent/.test(said(r));

describe('the /goal loop through the client', { timeout: 180_000 }, () => {
  test('re-prompts with what the judge found missing until done; its state is in the info and the events; 409 while active, 400 when empty', async (t) => {
    const conv = await started(t, '/workspace/goal');
    const ws = hostWorkspace(conv.id);
    const from = llmA.requests.length;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    llmA.push(
      async () => (await gate, { toolCalls: [{ name: 'terminal', arguments: { command: 'echo partial > goal.txt' } }] }),
      { toolCalls: [{ name: 'finish', arguments: { message: 'made goal.txt' } }] },
      verdict(false, 'goal.txt must say done'),
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo done > goal.txt' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'goal.txt says done' } }] },
      verdict(true),
    );
    await assert.rejects(conv.startGoal('   '), rejectsWith(400, /must not be empty/));
    await conv.startGoal('Make goal.txt that says done', 3);
    await llmA.waitForRequests(from + 1);
    // a run or a goal is active: no second goal, no second run
    await assert.rejects(conv.startGoal('another goal'), rejectsWith(409));
    await assert.rejects(conv.resumeGoal(), rejectsWith(409));
    const running: any = await conv.state.refresh();
    assert.deepEqual([running.goal.active, running.goal.status, running.goal.iteration, running.goal.max_iterations], [true, 'running', 0, 3]);
    release();
    await waitFor(async () => ((await conv.state.refresh()) as any).goal?.active === false, 'the goal ended', 90_000);
    const info: any = await conv.state.refresh();
    assert.deepEqual([info.goal.status, info.goal.iteration, info.goal.verdict.complete], ['complete', 2, true]);
    assert.equal(fs.readFileSync(path.join(ws, 'goal.txt'), 'utf8'), 'done\n');

    const reqs = llmA.requests.slice(from);
    assert.deepEqual(
      reqs.map((r) => (isJudge(r) ? 'judge' : 'agent')),
      ['agent', 'agent', 'judge', 'agent', 'agent', 'judge'],
    );
    assert.match(said(reqs[2]!), /Make goal\.txt that says done/, 'the judge is given the objective');
    assert.match(said(reqs[2]!), /partial/, 'and the transcript');
    assert.match(said(reqs[3]!), /goal\.txt must say done/, 'the re-prompt says what the judge found missing');
    const users: any[] = (await conv.state.events.search({ kind: 'MessageEvent', source: 'user' } as never)).items;
    assert.equal(users.length, 2, 'the objective, then one follow-up');
    const states = (await conv.state.events.search({ kind: 'ConversationStateUpdateEvent', limit: 100 } as never)).items.filter((e: any) => e.key === 'goal');
    assert.deepEqual(
      states.map((e: any) => [e.value.status, e.value.iteration]),
      [
        ['running', 0],
        ['running', 1],
        ['complete', 2],
      ],
    );
    await assert.rejects(conv.resumeGoal(), rejectsWith(400, /No goal to resume/));
  });

  test('max_iterations caps the audits; a stop leaves the goal interrupted (its run goes on) and resume continues it', async (t) => {
    const conv = await started(t, '/workspace/goal-stop');
    llmA.push({ text: 'tried' }, verdict(false, 'not yet'));
    await conv.startGoal('An objective it never reaches', 1);
    await waitFor(async () => ((await conv.state.refresh()) as any).goal?.active === false, 'capped', 90_000);
    assert.deepEqual([((await conv.state.refresh()) as any).goal.status, ((await conv.state.refresh()) as any).goal.iteration], ['capped', 1]);

    const from = llmA.requests.length;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    llmA.push(async () => (await gate, { text: 'first attempt' }));
    await conv.startGoal('Say hello twice', 4);
    await llmA.waitForRequests(from + 1);
    await conv.stopGoal();
    const stopped: any = await conv.state.refresh();
    assert.deepEqual([stopped.goal.active, stopped.goal.status], [false, 'interrupted']);
    release();
    await settled(conv, 'finished');
    assert.equal(llmA.requests.length, from + 1, 'a stopped goal asks no judge');

    llmA.push({ text: 'second attempt' }, verdict(true));
    await conv.resumeGoal();
    await waitFor(async () => ((await conv.state.refresh()) as any).goal?.status === 'complete', 'complete after resume', 90_000);
    assert.match(said(llmA.requests[from + 1]!), /resuming a goal that was stopped/);
    assert.equal(((await conv.state.refresh()) as any).goal.iteration, 1, 'resumed from the audit it had reached');
    // stopping with nothing running is a success
    await conv.stopGoal();
  });

  test("the user's own message supersedes a running goal: it is interrupted, the run takes the message", async (t) => {
    const conv = await started(t, '/workspace/goal-user');
    const from = llmA.requests.length;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    llmA.push(async () => (await gate, { toolCalls: [{ name: 'terminal', arguments: { command: 'true' } }] }), { text: 'took your message' });
    await conv.startGoal('Something long', 5);
    await llmA.waitForRequests(from + 1);
    await conv.sendMessage('actually, stop and listen');
    await waitFor(async () => ((await conv.state.refresh()) as any).goal?.status === 'interrupted', 'interrupted by the message');
    release();
    await settled(conv, 'finished');
    assert.match(said(llmA.requests[from + 1]!), /actually, stop and listen/);
  });
});

describe('the trajectory through the client', { timeout: 180_000 }, () => {
  test('downloadTrajectory: a ZIP of every persisted event and the metadata, unzipped; secrets masked; streamed', async (t) => {
    const conv = await started(t, '/workspace/trajectory');
    await conv.updateSecrets({ TRAJ_TOKEN: SECRET });
    llmA.push(
      { toolCalls: [{ name: 'terminal', arguments: { command: 'echo "t=$TRAJ_TOKEN"' } }] },
      { toolCalls: [{ name: 'finish', arguments: { message: 'traced' } }] },
    );
    await conv.sendMessage('trace me');
    await conv.run();
    await settled(conv, 'finished');
    // a long tail of messages: the ZIP is made page by page
    for (let i = 0; i < 600; i += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, j) => conv.sendMessage(`note ${i + j} ${'x'.repeat(200)}`)));
    }
    const events: any[] = [];
    for (let page: string | undefined; ; ) {
      const r: any = await conv.state.events.search({ limit: 100, page_id: page } as never);
      events.push(...r.items);
      if (!r.next_page_id) break;
      page = r.next_page_id;
    }
    const blob: Blob = await conv.downloadTrajectory();
    const files = unzipSync(new Uint8Array(await blob.arrayBuffer()));
    const text = (name: string) => new TextDecoder().decode(files[name]);
    const meta = JSON.parse(text('meta.json'));
    assert.equal(meta.id, conv.id);
    assert.equal(meta.agent.llm.api_key, '**********');
    const names = Object.keys(files)
      .filter((n) => n.startsWith('events/'))
      .sort();
    assert.equal(names.length, events.length, 'every persisted event');
    for (const [i, e] of events.entries()) {
      assert.equal(names[i], `events/event-${String(e.seq).padStart(5, '0')}-${e.id}.json`);
      assert.deepEqual(JSON.parse(text(names[i]!)), e);
    }
    for (const name of Object.keys(files)) assert.ok(!text(name).includes(SECRET), `${name} has no secret`);
    assert.ok(Object.values(files).some((b) => new TextDecoder().decode(b).includes('t=<secret_hidden>')));

    const raw = await fetch(`${d.url}/api/file/download-trajectory/${conv.id}`, { headers: H });
    assert.equal(raw.status, 200);
    assert.equal(raw.headers.get('content-type'), 'application/zip');
    assert.equal(raw.headers.get('content-length'), null, 'sent as it is made, not built first');
    assert.match(raw.headers.get('content-disposition') ?? '', /trajectory-.*\.zip/);
    await raw.arrayBuffer();
  });

  test('a client that stops reading a trajectory leaves the daemon serving; an unknown conversation is a 404', async (t) => {
    const conv = await started(t, '/workspace/trajectory-slow');
    // incompressible: the ZIP is larger than what the sockets buffer
    for (let i = 0; i < 400; i += 50) await Promise.all(Array.from({ length: 50 }, () => conv.sendMessage(crypto.randomBytes(3000).toString('base64'))));
    const ctl = new AbortController();
    const res = await fetch(`${d.url}/api/file/download-trajectory/${conv.id}`, { headers: H, signal: ctl.signal });
    const reader = res.body!.getReader();
    await reader.read(); // one chunk, then nothing
    assert.equal((await d.req('GET', `/api/conversations/${conv.id}`, undefined, H)).status, 200);
    ctl.abort();
    await assert.rejects(new C.FileClient(opts()).downloadTrajectory('00000000-0000-4000-8000-000000000003'), rejectsWith(404));
    await waitFor(async () => (await d.req('GET', '/health')).status === 200, 'healthy');
  });
});

describe("the conversation features keep Parley's rules", { timeout: 120_000 }, () => {
  test('the key on every route, 404 for an unknown conversation, 422 in the seed shape, the body limit; navigate and ACP models answer why not', async (t) => {
    const conv = await started(t, '/workspace/rules');
    const id = conv.id;
    const routes: [string, string, unknown][] = [
      ['POST', `/api/conversations/${id}/fork`, {}],
      ['POST', `/api/conversations/${id}/navigate`, {}],
      ['POST', `/api/conversations/${id}/goal`, { objective: 'x' }],
      ['POST', `/api/conversations/${id}/goal/stop`, {}],
      ['POST', `/api/conversations/${id}/goal/resume`, {}],
      ['POST', `/api/conversations/${id}/switch_llm`, { llm: { model: 'openai/x' } }],
      ['POST', `/api/conversations/${id}/switch_profile`, { profile_name: 'x' }],
      ['POST', `/api/conversations/${id}/switch_acp_model`, { model: 'x' }],
      ['POST', `/api/conversations/${id}/security_analyzer`, { security_analyzer: null }],
      ['GET', `/api/file/download-trajectory/${id}`, undefined],
    ];
    for (const [m, p, b] of routes) {
      assert.equal((await d.req(m, p, b)).status, 401, `${m} ${p} without the key`);
      const missing = p.replace(id, '00000000-0000-4000-8000-00000000dead');
      assert.equal((await d.req(m, missing, b, H)).status, 404, `${m} ${missing}`);
    }
    const bad = await d.req('POST', `/api/conversations/${id}/goal`, { objective: 'x', max_iterations: 0, nope: 1 }, H);
    assert.equal(bad.status, 422);
    assert.deepEqual(
      bad.body.detail.map((i: any) => i.loc),
      [
        ['body', 'max_iterations'],
        ['body', 'nope'],
      ],
    );
    const llmKey = await d.req('POST', `/api/conversations/${id}/switch_llm`, { llm: { model: 5, api_key: KEY_A } }, H);
    assert.equal(llmKey.status, 422);
    assert.ok(!llmKey.text.includes(KEY_A), 'a 422 never echoes a key');
    const fork = await d.req('POST', `/api/conversations/${id}/fork?include_skills=maybe`, {}, H);
    assert.deepEqual(fork.body.detail[0].loc, ['query', 'include_skills']);
    const huge = await d.req('POST', `/api/conversations/${id}/goal`, { objective: 'o'.repeat(11 * 1024 * 1024) }, H);
    assert.equal(huge.status, 413);
    await assert.rejects(conv.navigateTo('any'), rejectsWith(501, /linear event log.*fork/));
    await assert.rejects(conv.switchAcpModel('x'), rejectsWith(400, /not an ACP conversation/));
  });
});
