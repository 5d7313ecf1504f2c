/**
 * The canary in a cloned repository: a scripted agent prints `env`, `git remote -v`,
 * `cat .git/config` and `$GITHUB_TOKEN`, then pushes a branch. The token is in no event, HTTP
 * response, WebSocket frame, log line, file under DATA_DIR (the workspace and its .git included),
 * LLM request or git URL; yet the agent's shell has it (masked in output) and `git push` works
 * through askpass.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { recordingReq, startDaemon, waitFor } from './support/daemon.js';
import { startGitServer } from './support/git-server.js';
import { startScriptedLlm } from './support/scripted-llm.js';
import { connect } from './support/ws-client.js';
import { walkFiles } from './support/files.js';

const GH = 'ghp_CANARYclone0123456789abcdefXYZ';
const SESSION = 'k-canary-repo-session';

test('canary token in a cloned repository: shell has it masked, push works, it appears nowhere', async () => {
  const git = await startGitServer({ token: GH });
  await git.createRepo(
    'acme/secret-app',
    { 'README.md': '# secret app\n', '.openhands/setup.sh': 'echo "setup sees ${#GITHUB_TOKEN} chars"; echo "$GITHUB_TOKEN"\n' },
    { private: true },
  );
  const llm = await startScriptedLlm();
  // the agent pushes to the git server on the host's loopback: its sandbox may reach that one port
  const d = await startDaemon({
    LLM_MODEL: 'openai/scripted',
    LLM_BASE_URL: llm.url,
    LLM_API_KEY: 'sk-canary-repo-llm',
    SESSION_API_KEY: SESSION,
    SANDBOX_ALLOW_NETS: `127.0.0.1:${new URL(git.url).port}`,
  });
  const H = { 'X-Session-API-Key': SESSION };
  const responses: string[] = [];
  const call = recordingReq(d, responses, H);
  try {
    assert.equal((await call('POST', '/api/add-git-providers', { provider_tokens: { github: { token: GH, host: git.url } } })).status, 200);
    llm.push(
      {
        toolCalls: [
          { name: 'terminal', arguments: { command: 'env; git remote -v; cat .git/config; echo "TOKEN=$GITHUB_TOKEN"; echo "LEN=${#GITHUB_TOKEN}"' } },
        ],
      },
      {
        toolCalls: [
          {
            name: 'terminal',
            arguments: {
              command:
                'git checkout -q -b agent-push && echo pushed > pushed.txt && git add pushed.txt && git commit -qm "agent push" && ' +
                'git push -q origin agent-push 2>&1; echo "PUSH_EXIT=$?"',
            },
          },
        ],
      },
      { toolCalls: [{ name: 'finish', arguments: { message: 'printed and pushed' } }] },
    );
    const created = await call('POST', '/api/conversations', {
      repository: 'acme/secret-app',
      git_provider: 'github',
      initial_user_msg: 'print everything, then push',
    });
    assert.equal(created.status, 200);
    const id = created.body.conversation_id;
    const ws = connect(`ws://127.0.0.1:${d.port}/sockets/events/${id}?resend_mode=all`, { headers: H });
    await waitFor(async () => ['finished', 'error'].includes((await call('GET', `/api/conversations/${id}`)).body.execution_status), 'run ended', 60_000);
    const evs = (await call('GET', `/api/conversations/${id}/events/search?limit=100`)).body.items as any[];
    assert.equal(evs.at(-1).value, 'finished', JSON.stringify(evs.filter((e) => e.kind.includes('Error'))));
    const [printed, pushed] = evs
      .filter((e) => e.kind === 'ObservationEvent' && e.tool_name === 'terminal')
      .map((e) => e.observation.content[0].text as string);
    // the shell has the token (its length shows through), masked wherever it is printed
    assert.match(printed!, /TOKEN=<secret_hidden>/);
    assert.match(printed!, new RegExp(`LEN=${GH.length}\\b`));
    assert.match(printed!, /GITHUB_TOKEN=<secret_hidden>/, 'env lists it, masked');
    assert.match(printed!, new RegExp(`origin\\s+${git.url.replace(/[.:/]/g, '\\$&')}/acme/secret-app\\.git \\(push\\)`), 'a plain remote URL');
    assert.doesNotMatch(printed!, /x-access-token/);
    // git push from the agent's shell authenticated through askpass
    assert.match(pushed!, /PUSH_EXIT=0/);
    assert.match(await git.gitIn('acme/secret-app', ['show-ref', 'refs/heads/agent-push']), /refs\/heads\/agent-push/);
    assert.equal((await git.gitIn('acme/secret-app', ['show', 'agent-push:pushed.txt'])).trim(), 'pushed');
    // the setup script saw it too, and its recorded output is masked
    const setup = evs.find((e) => e.key === 'setup_script');
    assert.match(setup.value.output, new RegExp(`setup sees ${GH.length} chars\\n<secret_hidden>`));

    await waitFor(() => ws.frames.some((f) => f.kind === 'ObservationEvent'), 'ws frames');
    ws.close();
    await d.stop();
    const places: [string, string][] = [
      ['responses', responses.join('\n')],
      ['websocket frames', JSON.stringify(ws.frames)],
      ['daemon output', d.output.join('\n')],
      ['LLM requests', JSON.stringify(llm.requests)],
      ['git request URLs', git.requests.map((r) => r.url).join('\n')],
    ];
    const files = walkFiles(d.dataDir);
    const workspaceFiles = files.filter(
      (f) => f.includes(`${path.sep}workspaces${path.sep}`) || f.includes(`disk.img.contents${path.sep}workspace${path.sep}`),
    );
    assert.ok(
      workspaceFiles.some((f) => f.endsWith(`${path.sep}.git${path.sep}config`)),
      'the walk covers .git',
    );
    assert.ok(workspaceFiles.some((f) => f.endsWith('pushed.txt')));
    for (const f of files) places.push([`file ${path.relative(d.dataDir, f)}`, fs.readFileSync(f).toString('latin1')]);
    for (const [where, text] of places) {
      assert.ok(!text.includes(GH), `the token was found in ${where}: ${text.slice(Math.max(0, text.indexOf(GH) - 200), text.indexOf(GH) + 50)}`);
    }
    // the server did get it, as the Basic password, which is how it was meant to travel
    assert.ok(git.requests.some((r) => r.user === 'x-access-token' && r.method === 'POST' && r.url.includes('git-receive-pack')));
  } finally {
    await d.stop();
    await llm.close();
    await git.close();
  }
});
