/**
 * The daemon's default network for sandboxes (SANDBOX_NETWORK=egress) and what no
 * sandbox may hold on the host, through the public API with the scripted LLM, judged from
 * the host. src/sandbox/network.ts is attacked in depth by test/sandbox-network.test.ts; here the
 * daemon wires it: the world (a network namespace of the test's own, test/support/netns.ts) is
 * reached through the egress path, the daemon's port, a server on the host's loopback and the
 * metadata address are not, SANDBOX_ALLOW_NETS opens exactly what it lists.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { allEvents } from './support/conversation-api.js';
import { startDaemon, waitFor, type DaemonHandle } from './support/daemon.js';
import { createTestNet, type TestNet } from './support/netns.js';
import { startScriptedLlm, type ScriptedLlm } from './support/scripted-llm.js';

const ROOT_RUN = process.getuid?.() === 0;
/** The sandboxes' uid (the daemon runs as root in these tests): the test network routes only its traffic. */
const SANDBOX_UID = 65533;

/** A TCP connection from the agent's shell: `OPEN <first line>` or `REFUSED`. */
const tcp = (host: string, port: number) =>
  `(exec 3<>/dev/tcp/${host}/${port} && printf 'x\\n' >&3 && ` +
  `timeout 5 head -c 200 <&3 | head -1 | sed 's/^/OPEN /' ; true) 2>/dev/null | grep . || echo REFUSED`;

async function shell(d: DaemonHandle, llm: ScriptedLlm, id: string, command: string): Promise<string> {
  const before = (await allEvents(d.req, id)).length;
  llm.push({ toolCalls: [{ name: 'terminal', arguments: { command, timeout: 60 } }] }, { text: 'done' });
  assert.equal((await d.req('POST', `/api/conversations/${id}/events`, { content: [{ text: 'go' }], run: true })).status, 200);
  const obs = await waitFor(async () => (await allEvents(d.req, id)).slice(before).find((e) => e.kind === 'ObservationEvent'), 'the command answered', 120_000);
  await waitFor(async () => (await d.req('GET', `/api/conversations/${id}`)).body.execution_status !== 'running', 'the turn ended', 60_000);
  return obs.observation.content.map((c: { text?: string }) => c.text ?? '').join('');
}

describe('sandbox: egress by default; no host privilege', {
  skip: !ROOT_RUN && 'needs root: the test network (veth, policy routes) and SANDBOX_UID',
  timeout: 170_000,
}, () => {
  let world: TestNet;
  let llm: ScriptedLlm;
  let d: DaemonHandle;
  let local: net.Server;
  let localPort = 0;

  before(async () => {
    world = await createTestNet(SANDBOX_UID);
    // a service on the host's loopback the sandboxes must not reach (but one that SANDBOX_ALLOW_NETS can open)
    local = net.createServer((s) => s.end('host-loopback-service\n'));
    await new Promise<void>((r) => local.listen(0, '127.0.0.1', r));
    localPort = (local.address() as net.AddressInfo).port;
    llm = await startScriptedLlm();
    d = await startDaemon({
      LLM_MODEL: 'openai/scripted',
      LLM_BASE_URL: llm.url,
      SANDBOX: 'bwrap',
      SANDBOX_ALLOW_NETS: `${world.blocked.ten}:7001,127.0.0.1:${localPort}`,
    });
  });
  after(async () => {
    await d?.stop();
    await llm?.close();
    local?.close();
    await world?.remove();
  });

  test('/server_info says egress with its allowed networks; the world is reached from the host side, nothing else is', async () => {
    const info = (await d.req('GET', '/server_info')).body.sandbox;
    assert.equal(info.network, 'egress');
    assert.deepEqual(info.egress.allow, [`${world.blocked.ten}:7001`, `127.0.0.1:${localPort}`]);
    assert.deepEqual(info.user, { uid: SANDBOX_UID, gid: SANDBOX_UID });
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    const seenBefore = world.seen.length;
    const out = await shell(
      d,
      llm,
      id,
      [
        `echo "world: $(${tcp(world.public, 7001)})"`,
        `echo "daemon: $(${tcp('127.0.0.1', d.port)})"`,
        `echo "daemon-gw: $(${tcp('10.0.2.2', d.port)})"`,
        `echo "pg: $(${tcp('127.0.0.1', 5432)})"`,
        `echo "local: $(${tcp('127.0.0.1', localPort)})"`,
        `echo "local-gw: $(${tcp('10.0.2.2', localPort)})"`,
        `echo "metadata: $(${tcp(world.blocked.metadata, 7001)})"`,
        `echo "ten-allowed: $(${tcp(world.blocked.ten, 7001)})"`,
        `echo "ten-other-port: $(${tcp(world.blocked.ten, 7002)})"`,
        `echo "192: $(${tcp(world.blocked.oneNineTwo, 7001)})"`,
        `echo "host-side: $(${tcp(world.hostSide, d.port)})"`,
      ].join('; '),
    );
    const line = (k: string) => new RegExp(`^${k}: (.*)$`, 'm').exec(out)?.[1] ?? `(no line ${k}) ${out}`;
    assert.match(line('world'), /^OPEN world /);
    assert.equal(line('daemon'), 'REFUSED');
    assert.equal(line('daemon-gw'), 'REFUSED');
    assert.equal(line('pg'), 'REFUSED');
    assert.match(line('local'), /^OPEN host-loopback-service/, 'SANDBOX_ALLOW_NETS=127.0.0.1:PORT: that one service, by the name the host gives it');
    assert.match(line('local-gw'), /^OPEN host-loopback-service/, 'and at the gateway, 10.0.2.2');
    assert.equal(line('metadata'), 'REFUSED');
    assert.match(line('ten-allowed'), /^OPEN world /);
    assert.equal(line('ten-other-port'), 'REFUSED');
    assert.equal(line('192'), 'REFUSED');
    assert.equal(line('host-side'), 'REFUSED', "the host's own address");
    // the world saw the allowed connections only, from the host's side of the veth
    const seen = world.seen.slice(seenBefore).filter((s) => s.proto === 'tcp');
    assert.deepEqual(
      seen.map((s) => `${s.local} ${s.remote}`).sort(),
      [`${world.blocked.ten}:7001 ${world.hostSide}`, `${world.public}:7001 ${world.hostSide}`].sort(),
    );
  });

  test('no host privilege: sysctl writes fail (even same value), /proc/sys and /sys read-only, no user namespace; uid and caps from the host', async () => {
    const id = (await d.req('POST', '/api/conversations', {})).body.conversation_id;
    const sysctls = [
      'kernel/core_pattern',
      'vm/swappiness',
      'kernel/hostname',
      'net/ipv4/ip_forward',
      'user/max_user_namespaces',
      'kernel/sysrq',
      'kernel/pid_max',
    ].filter((s) => fs.existsSync(`/proc/sys/${s}`));
    const hostBefore = sysctls.map((s) => fs.readFileSync(`/proc/sys/${s}`, 'utf8'));
    const marker = `7171${process.pid % 1000}`;
    const out = await shell(
      d,
      llm,
      id,
      [
        ...sysctls.map((s) => `v=$(cat /proc/sys/${s}); echo "$v" > /proc/sys/${s} 2>/dev/null; echo "${s} rc=$?"`),
        `echo '|/workspace/h.sh' > /proc/sys/kernel/core_pattern 2>/dev/null; echo "core rc=$?"`,
        'echo h > /proc/sysrq-trigger 2>/dev/null; echo "sysrq rc=$?"',
        'touch /sys/x 2>/dev/null; echo "sys rc=$?"',
        `grep -E ' /proc/sys | /sys ' /proc/self/mountinfo | awk '{print $5, $6}'`,
        'unshare -U true 2>/dev/null; echo "unshare-user rc=$?"',
        'unshare -m true 2>/dev/null; echo "unshare-mount rc=$?"',
        `(sleep ${marker} &)`,
      ].join('; '),
    );
    for (const s of [...sysctls, 'core', 'sysrq', 'sys', 'unshare-user', 'unshare-mount']) {
      const rc = new RegExp(`^${s} rc=(\\d+)$`, 'm').exec(out)?.[1];
      assert.ok(rc !== undefined && rc !== '0', `${s}: ${out}`);
    }
    assert.match(out, /^\/proc\/sys ro,/m);
    assert.match(out, /^\/sys ro,/m);
    assert.deepEqual(
      sysctls.map((s) => fs.readFileSync(`/proc/sys/${s}`, 'utf8')),
      hostBefore,
      "the host's sysctls are unchanged",
    );
    // judged from the host: the background job runs as the sandbox uid, no capability, no_new_privs
    const job = await waitFor(
      () =>
        fs.readdirSync('/proc').find((p) => {
          try {
            return /^\d+$/.test(p) && fs.readFileSync(`/proc/${p}/cmdline`, 'utf8') === `sleep\0${marker}\0`;
          } catch {
            return false;
          }
        }),
      'the job runs',
      20_000,
    );
    const status = fs.readFileSync(`/proc/${job}/status`, 'utf8');
    assert.match(status, new RegExp(`^Uid:\\s+${SANDBOX_UID}\\s+${SANDBOX_UID}\\s+${SANDBOX_UID}\\s+${SANDBOX_UID}$`, 'm'));
    assert.match(status, /^Groups:\s*$/m);
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) assert.match(status, new RegExp(`^${set}:\\s+0+$`, 'm'), set);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.notEqual(fs.readlinkSync(`/proc/${job}/ns/net`), fs.readlinkSync('/proc/self/ns/net'), 'its own network namespace');
    await d.req('DELETE', `/api/conversations/${id}`);
  });
});
