/**
 * SANDBOX_NETWORK=egress (src/sandbox/network.ts), attacked from inside a sandbox and judged from
 * the host. A sandbox is built as the launcher builds one (an unprivileged bwrap holder as a
 * dedicated uid), egress is attached, and the agent's processes (joined with no capability) try
 * every way to the host they can think of. No traffic leaves the machine: the "internet" is a
 * network namespace of the test's own (test/support/netns.ts), routed only for the sandbox's uid,
 * and it also answers on 169.254.169.254 and private addresses, so that a filter that let them
 * through would be seen.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { after, before, describe, test } from 'node:test';
import {
  attachEgress,
  EGRESS_NET,
  EGRESS_RESOLV_CONF,
  egressRuleset,
  formatAllowedNet,
  parseAllowNets,
  probeEgress,
  type EgressHandle,
  type RunAs,
} from '../src/sandbox/network.js';
import { ROOT } from './support/daemon.js';
import {
  collect,
  createTestNet,
  PROBE_INSIDE,
  probeFromHost,
  processesOf,
  startSandbox,
  testNetLeft,
  WORLD_PORTS,
  type ProbeAttempt,
  type TestNet,
  type TestSandbox,
} from './support/netns.js';

describe('SANDBOX_ALLOW_NETS', () => {
  test('CIDRs, bare addresses and ports, IPv4 and IPv6', () => {
    assert.deepEqual(parseAllowNets(' 10.1.2.0/24:3128, 192.168.1.5,[fd00::/8]:443 ,[2001:db8::1], fd00:1::/32,127.0.0.1:9418, '), [
      { family: 4, address: '10.1.2.0', prefix: 24, port: 3128 },
      { family: 4, address: '192.168.1.5', prefix: 32, port: null },
      { family: 6, address: 'fd00::', prefix: 8, port: 443 },
      { family: 6, address: '2001:db8::1', prefix: 128, port: null },
      { family: 6, address: 'fd00:1::', prefix: 32, port: null },
      { family: 4, address: '127.0.0.1', prefix: 32, port: 9418 },
    ]);
    assert.equal(
      parseAllowNets(' 10.1.2.0/24:3128, 192.168.1.5,[fd00::/8]:443 ,[2001:db8::1], fd00:1::/32,127.0.0.1:9418').map(formatAllowedNet).join(','),
      '10.1.2.0/24:3128,192.168.1.5,[fd00::/8]:443,2001:db8::1,fd00:1::/32,127.0.0.1:9418',
    );
    assert.deepEqual(parseAllowNets(''), []);
    assert.deepEqual(parseAllowNets(' , '), []);
  });

  test('a bad entry throws one line that names it', () => {
    const cases: [string, RegExp][] = [
      ['10.1.2.0/33', /"10\.1\.2\.0\/33" has a prefix length that is not 0 to 32/],
      ['10.1.2.3/24', /"10\.1\.2\.3\/24" has address bits set after \/24/],
      ['fd00::1/8', /"fd00::1\/8" has address bits set after \/8/],
      ['10.1.2.3:0', /"10\.1\.2\.3:0" has a port that is not 1 to 65535/],
      ['10.1.2.3:65536', /port that is not 1 to 65535/],
      ['10.1.2.3:http', /port that is not 1 to 65535/],
      ['example.com', /"example\.com" is not an address or CIDR/],
      ['10.1.2', /is not an address or CIDR/],
      ['fd00::/8:443', /"fd00::\/8:443" has a port after an IPv6 address: write it in brackets/],
      ['[10.1.2.3]:80', /brackets are for IPv6/],
      ['[fe80::1%eth0]', /is not an address or CIDR/],
      ['127.0.0.0/8', /opens the host's loopback: .*127\.0\.0\.1:PORT/],
      ['127.0.0.1', /opens the host's loopback/],
      ['127.0.0.2:80', /opens the host's loopback/],
      ['[::1]:80', /host's IPv6 loopback/],
    ];
    for (const [value, re] of cases) {
      assert.throws(
        () => parseAllowNets(`10.0.0.0/8, ${value}`),
        (e: Error) => re.test(e.message) && e.message.startsWith('SANDBOX_ALLOW_NETS: ') && !e.message.includes('\n'),
        value,
      );
    }
  });

  test('the ruleset: the namespace loopback, DNS on 53, the allowed entries, then the blocked ranges and the host addresses', () => {
    const rules = egressRuleset(parseAllowNets('10.1.2.0/24:3128, 127.0.0.1:9418, [fd00::/8]:443'), ['192.0.2.9', 'fe80::1%eth0']);
    const chain = rules.slice(rules.indexOf('chain output'));
    const order = [
      'oif "lo" accept',
      'ip daddr 10.0.2.3 meta l4proto { tcp, udp } th dport 53 accept',
      'ip daddr 10.0.2.2 meta l4proto { tcp, udp } th dport 9418 accept',
      'ip daddr { 10.0.2.0/24, 255.255.255.255 } counter reject',
      'ip daddr 10.1.2.0/24 meta l4proto { tcp, udp } th dport 3128 accept',
      'ip6 daddr fd00::/8 meta l4proto { tcp, udp } th dport 443 accept',
      'ip daddr @blocked4 counter reject',
      'ip6 daddr @blocked6 counter reject',
    ];
    let at = 0;
    for (const r of order) {
      const i = chain.indexOf(r, at);
      assert.ok(i >= at, `${r} after the rules before it:\n${chain}`);
      at = i;
    }
    assert.match(
      rules,
      new RegExp(
        /set blocked4 \{[^}]*elements = \{ 0\.0\.0\.0\/8, 10\.0\.0\.0\/8, 100\.64\.0\.0\/10, 127\.0\.0\.0\/8, 169\.254\.0\.0\/16, /.source +
          /172\.16\.0\.0\/12, 192\.168\.0\.0\/16, 224\.0\.0\.0\/4, 240\.0\.0\.0\/4, 192\.0\.2\.9 \}/.source,
      ),
    );
    assert.match(rules, /set blocked6 \{[^}]*elements = \{[^}]*fc00::\/7, fe80::\/10, ff00::\/8, fe80::1 \}/);
    assert.match(rules, /policy accept/);
  });
});

const notRoot = process.getuid?.() !== 0 && 'needs root: the test builds its own network namespace, veth pair and policy routes (ip netns, ip rule)';

describe('SANDBOX_NETWORK=egress, attacked from inside the sandbox', { skip: notRoot, timeout: 300_000 }, () => {
  // a uid of this run only: the world is routed for it alone, and whatever is left of it is ours
  const uid = 1_900_000_000 + Math.floor(Math.random() * 90_000_000);
  const runAs: RunAs = { uid, gid: uid };
  let world: TestNet;
  let hostSrv: HostServers;
  let sb: TestSandbox;
  let egress: EgressHandle;
  const sandboxes: TestSandbox[] = [];
  const handles: EgressHandle[] = [];

  /** A sandbox with egress. `byFd`: its namespaces passed as fds the caller holds (as the launcher does), else as paths. */
  async function sandboxWithEgress(allow = '', byFd = false): Promise<{ sb: TestSandbox; egress: EgressHandle }> {
    const s = await startSandbox(uid, { resolvConf: EGRESS_RESOLV_CONF });
    sandboxes.push(s);
    const fds = byFd ? [fs.openSync(s.userns, 'r'), fs.openSync(s.netns, 'r')] : [];
    try {
      const e = await attachEgress({ userns: fds[0] ?? s.userns, netns: fds[1] ?? s.netns, runAs, allow: parseAllowNets(allow) });
      handles.push(e);
      return { sb: s, egress: e };
    } finally {
      for (const fd of fds) fs.closeSync(fd);
    }
  }

  /**
   * Host addresses to try from the sandbox, link-local ones with the sandbox's interface as their scope.
   * Left out: IPv6 addresses still in duplicate address detection (a veth another test file just made:
   * nothing answers on them yet, from the host or anywhere).
   */
  const hostTargets = () => {
    const tentative = execFileSync('ip', ['-o', '-6', 'addr', 'show', 'tentative'], { encoding: 'utf8' });
    return Object.entries(os.networkInterfaces())
      .flatMap(([, list]) => list ?? [])
      .filter((i) => !tentative.includes(` ${i.address}/`))
      .map((i) => ({
        address: i.address,
        inSandbox: i.scopeid ? `${i.address}%${EGRESS_NET.iface}` : i.address,
        onHost: i.scopeid ? `${i.address}%${ifaceOf(i.address)}` : i.address,
      }));
  };
  /** The address is still the host's (another test file's veth may have gone meanwhile). */
  const stillHost = (address: string) => Object.values(os.networkInterfaces()).some((list) => (list ?? []).some((i) => i.address === address));

  before(async () => {
    world = await createTestNet(uid);
    hostSrv = await startHostServers();
    ({ sb, egress } = await sandboxWithEgress('', true));
  });

  after(async () => {
    await Promise.all(handles.map((h) => h.close()));
    await Promise.all(sandboxes.map((s) => s.close()));
    await hostSrv?.close();
    await world?.remove();
  });

  test('the world answers the sandbox uid from the host on every address, and the host servers answer it (so the refusals below can fail)', async () => {
    const b = world.blocked;
    const attempts: ProbeAttempt[] = [];
    for (const h of [world.public, b.metadata, b.ten, b.oneSevenTwo, b.oneNineTwo, b.cgnat, world.public6, b.ula]) {
      for (const port of WORLD_PORTS) {
        attempts.push({ id: `tcp ${h} ${port}`, kind: 'tcp', host: h, port });
        attempts.push({ id: `udp ${h} ${port}`, kind: 'udp', host: h, port });
      }
    }
    attempts.push({ id: 'loopback', kind: 'tcp', host: '127.0.0.1', port: hostSrv.loopbackPort });
    const targets = hostTargets();
    for (const t of targets) attempts.push({ id: `host ${t.address}`, kind: 'tcp', host: t.onHost, port: hostSrv.anyPort });
    if (world.resolvers.length > 0) attempts.push({ id: 'dns', kind: 'dns', name: 'egress-test.invalid' });
    const r = await probeFromHost(uid, attempts);
    for (const a of attempts.filter((x) => x.id.startsWith('tcp ') || x.id.startsWith('udp '))) {
      assert.equal(r[a.id]!.banner, `world ${hostPort(a.host!, a.port!)}`, `${a.id}: ${JSON.stringify(r[a.id])}`);
    }
    assert.equal(r.loopback!.banner, 'host loopback');
    for (const t of targets) {
      if (r[`host ${t.address}`]!.banner !== 'host any' && !stillHost(t.address)) continue;
      assert.equal(r[`host ${t.address}`]!.banner, 'host any', `host address ${t.address}: ${JSON.stringify(r[`host ${t.address}`])}`);
    }
    if (world.resolvers.length > 0) assert.equal(r.dns!.banner, world.dnsAnswer, 'the host resolver is answered by the world for this uid');
    // the world saw the host's side of the veth, as it will for the sandbox's connections
    assert.ok(world.seen.some((s) => s.proto === 'tcp' && s.remote === world.hostSide));
  });

  test('egress reaches the world through slirp4netns: the world sees the host, not the sandbox', async () => {
    // attached means configured: the address and the default route are there
    const conf = await sb.run(['/bin/sh', '-c', `ip -4 -o addr show dev ${EGRESS_NET.iface}; ip -4 route show default`]);
    assert.match(conf.stdout, new RegExp(` inet ${EGRESS_NET.address.replace(/\./g, '\\.')}/24 `));
    assert.match(conf.stdout, new RegExp(`default via ${EGRESS_NET.gateway.replace(/\./g, '\\.')} dev ${EGRESS_NET.iface}`));
    const before = world.seen.length;
    const r = await sb.probe([
      { id: 'tcp', kind: 'tcp', host: world.public, port: 7001 },
      { id: 'udp', kind: 'udp', host: world.public, port: 7002 },
    ]);
    assert.equal(r.tcp!.banner, `world ${world.public}:7001`, JSON.stringify(r.tcp));
    assert.equal(r.udp!.banner, `world ${world.public}:7002`, JSON.stringify(r.udp));
    const seen = world.seen.slice(before);
    assert.deepEqual(seen.map((s) => `${s.proto} ${s.local} ${s.remote}`).sort(), [
      `tcp ${world.public}:7001 ${world.hostSide}`,
      `udp ${world.public}:7002 ${world.hostSide}`,
    ]);
    assert.ok(!seen.some((s) => s.remote.includes(EGRESS_NET.address)));
  });

  test('slirp4netns runs as the sandbox uid, confined: no host capability, no_new_privs, seccomp, its own mount namespace, the sandbox user namespace', () => {
    const status = fs.readFileSync(`/proc/${egress.pid}/status`, 'utf8');
    assert.match(fs.readFileSync(`/proc/${egress.pid}/cmdline`, 'utf8'), /slirp4netns/);
    assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, 'm'));
    assert.match(status, new RegExp(`^Gid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, 'm'));
    assert.match(status, /^Groups:\s*$/m);
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.match(status, /^Seccomp:\s+2$/m);
    // CAP_NET_BIND_SERVICE only, and only in the sandbox's user namespace (not the host's)
    assert.match(status, /^CapEff:\s+0000000000000400$/m);
    const ns = (pid: number | string, kind: string) => fs.readlinkSync(`/proc/${pid}/ns/${kind}`);
    assert.equal(ns(egress.pid, 'user'), ns(sb.init, 'user'));
    assert.notEqual(ns(egress.pid, 'user'), ns('self', 'user'));
    assert.notEqual(ns(egress.pid, 'mnt'), ns('self', 'mnt'));
    assert.equal(ns(egress.pid, 'net'), ns('self', 'net'), 'its sockets are the host network');
  });

  test('the sandbox resolv.conf names the forwarder, which forwards to the host resolver', {
    skip: !resolvConfHasIPv4() && 'the host has no IPv4 resolver off loopback to route to the test network',
  }, async () => {
    const r = await sb.run(['cat', '/etc/resolv.conf']);
    assert.equal(r.stdout, EGRESS_RESOLV_CONF);
    const before = world.seen.length;
    const d = await sb.probe([{ id: 'dns', kind: 'dns', name: 'registry.egress-test.invalid' }]);
    assert.equal(d.dns!.banner, world.dnsAnswer, JSON.stringify(d.dns));
    const seen = world.seen.slice(before).filter((s) => s.proto === 'dns');
    assert.ok(seen.length > 0 && seen.every((s) => s.remote === world.hostSide), JSON.stringify(seen));
  });

  test('the host, its loopback, the gateway, link-local, private and reserved ranges are refused, over TCP and UDP, IPv4 and IPv6', async () => {
    const attempts: ProbeAttempt[] = [];
    const tcp = (host: string, port: number) => attempts.push({ id: `tcp ${host} ${port}`, kind: 'tcp', host, port });
    const udp = (host: string, port: number) => attempts.push({ id: `udp ${host} ${port}`, kind: 'udp', host, port });
    const { loopbackPort, anyPort, udpPort } = hostSrv;
    // the sandbox's own loopback is not the host's
    for (const p of [loopbackPort, anyPort, 5432, 4222]) tcp('127.0.0.1', p);
    tcp('::1', anyPort);
    udp('127.0.0.1', udpPort);
    // the gateway: slirp4netns maps it to the host's loopback unless told not to
    for (const p of [loopbackPort, anyPort, 5432, 4222, 22, 53, 80]) tcp(EGRESS_NET.gateway, p);
    udp(EGRESS_NET.gateway, udpPort);
    udp(EGRESS_NET.gateway, 53);
    // the DNS forwarder on any port but 53, other addresses of the tool's network, its broadcast
    for (const p of [80, 5432, anyPort]) tcp(EGRESS_NET.dns, p);
    udp(EGRESS_NET.dns, 5353);
    udp(EGRESS_NET.dns, udpPort);
    tcp('10.0.2.15', anyPort);
    tcp('10.0.2.1', anyPort);
    udp('10.0.2.255', udpPort);
    // every address of the host's interfaces, IPv6 and link-local included
    for (const t of hostTargets()) {
      tcp(t.inSandbox, anyPort);
      tcp(t.inSandbox, 5432);
      udp(t.inSandbox, udpPort);
    }
    // the world's blocked addresses (each answers the host: a filter that let them pass is caught)
    const b = world.blocked;
    for (const h of [b.metadata, b.ten, b.oneSevenTwo, b.oneNineTwo, b.cgnat, b.ula]) {
      for (const p of WORLD_PORTS) {
        tcp(h, p);
        udp(h, p);
      }
    }
    tcp(b.metadata, 80);
    // IPv4 inside IPv6, multicast, broadcast, reserved, "this network"
    tcp(`::ffff:${b.metadata}`, 7001);
    tcp(`::ffff:${EGRESS_NET.gateway}`, anyPort);
    tcp('::ffff:127.0.0.1', loopbackPort);
    udp('224.0.0.251', 5353);
    udp('255.255.255.255', udpPort);
    tcp('240.0.0.1', 80);
    tcp('0.0.0.1', 80);
    // the host's resolvers directly (they are in private space here: the world would answer)
    for (const r of world.resolvers.filter(isPrivate4)) {
      udp(r, 53);
      tcp(r, 53);
    }
    // IPv6 has no route out: the world's public IPv6 address is not reached either
    tcp(world.public6, 7001);
    udp(world.public6, 7001);
    tcp('fe80::2%tap0', anyPort);
    tcp('fd00::2', anyPort);
    tcp('ff02::1%tap0', anyPort);

    const worldBefore = world.seen.length;
    const hostBefore = hostSrv.seen.length;
    const r = await sb.probe(attempts);
    const reached = Object.entries(r).filter(([, v]) => v.ok);
    assert.deepEqual(reached, [], 'nothing is reached');
    assert.deepEqual(world.seen.slice(worldBefore), [], 'the world saw nothing');
    assert.deepEqual(hostSrv.seen.slice(hostBefore), [], "the host's servers saw nothing");
    // and the filter is what refused the IPv4 ones that would have gone out: an immediate ICMP
    // "administratively prohibited" (EHOSTUNREACH), not a timeout or the tool's own refusal
    for (const h of [b.metadata, b.ten, b.oneSevenTwo, b.oneNineTwo, b.cgnat, EGRESS_NET.gateway, EGRESS_NET.dns]) {
      for (const [id, v] of Object.entries(r)) if (id.startsWith(`tcp ${h} `)) assert.equal(v.code, 'EHOSTUNREACH', `${id}: ${JSON.stringify(v)}`);
    }
  });

  test('raw, packet and ICMP sockets cannot be opened', async () => {
    const r = await sb.run([
      'perl',
      '-MSocket',
      '-e',
      'for my $s ([PF_INET, SOCK_RAW, 255], [PF_INET6, SOCK_RAW, 255], [PF_INET, SOCK_RAW, 1], ' +
        '[17, SOCK_RAW, 0], [17, SOCK_DGRAM, 0], [PF_INET, SOCK_DGRAM, 1], [PF_INET6, SOCK_DGRAM, 58]) ' +
        '{ print(socket(my $fh, $s->[0], $s->[1], $s->[2]) ? "open\\n" : "refused: $!\\n") }',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    assert.equal(lines.length, 7, r.stdout);
    for (const l of lines) assert.match(l, /^refused: (Operation not permitted|Permission denied)$/, r.stdout);
  });

  test('a socket bound to a device (SO_BINDTODEVICE, allowed without privilege) does not get around the filter', async () => {
    // lo is accepted by the filter: a packet for the world sent out of lo comes back to the sandbox
    // (no forwarding there); tap0 with the host's loopback as destination is refused
    const b = world.blocked;
    const targets = [
      ['lo', b.metadata, 7001],
      ['lo', world.public, 7001],
      ['lo', EGRESS_NET.gateway, hostSrv.anyPort],
      [EGRESS_NET.iface, '127.0.0.1', hostSrv.loopbackPort],
      [EGRESS_NET.iface, b.ten, 7001],
      [EGRESS_NET.iface, EGRESS_NET.address, hostSrv.anyPort],
    ] as const;
    const perl = [
      'use Socket;',
      'my ($dev, $host, $port) = @ARGV;',
      'socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\\n";',
      'setsockopt($s, SOL_SOCKET, 25, $dev) or die "bind to $dev: $!\\n";',
      '$SIG{ALRM} = sub { print "timeout\\n"; exit 0 }; alarm 3;',
      'print(connect($s, pack_sockaddr_in($port, inet_aton($host))) ? "connected\\n" : "refused: $!\\n");',
    ].join(' ');
    const worldBefore = world.seen.length;
    const hostBefore = hostSrv.seen.length;
    const results = await Promise.all(targets.map(([dev, host, port]) => sb.run(['perl', '-e', perl, dev, host, String(port)])));
    for (const [i, [dev, host, port]] of targets.entries()) {
      const r = results[i]!;
      assert.equal(r.code, 0, r.stderr);
      assert.doesNotMatch(r.stdout, /connected/, `${dev} ${host}:${port}: ${r.stdout}`);
      assert.match(r.stdout, /^(refused: .+|timeout)\n$/, `${dev} ${host}:${port}: ${r.stdout}${r.stderr}`);
    }
    assert.deepEqual(world.seen.slice(worldBefore), []);
    assert.deepEqual(hostSrv.seen.slice(hostBefore), []);
  });

  test('the agent cannot remove or change the filter, add an address or a route, or touch the interface', async () => {
    const script = [
      'nft flush ruleset',
      'nft delete table inet parley_egress',
      'nft add table inet agent',
      'nft insert rule inet parley_egress output accept',
      'ip addr add 10.9.9.9/32 dev lo',
      `ip addr add 198.51.100.9/32 dev ${EGRESS_NET.iface}`,
      `ip route add ${world.blocked.metadata}/32 via ${EGRESS_NET.gateway}`,
      'ip route del default',
      `ip link set ${EGRESS_NET.iface} down`,
      'ip link add agent0 type dummy',
      'echo "0 2147483647" > /proc/sys/net/ipv4/ping_group_range',
      'echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet',
      // a user namespace of its own gives capabilities over nothing it is in
      'unshare -r nft flush ruleset',
      'unshare -r ip route del default',
    ];
    const r = await sb.run(['/bin/sh', '-c', script.map((c) => `(${c}) >/dev/null 2>&1; echo "$?"`).join('; ')]);
    const codes = r.stdout.trim().split('\n');
    assert.equal(codes.length, script.length, r.stdout + r.stderr);
    for (const [i, c] of script.entries()) assert.notEqual(codes[i], '0', `${c} succeeded`);
    const p = await sb.probe([
      { id: 'metadata', kind: 'tcp', host: world.blocked.metadata, port: 7001 },
      { id: 'public', kind: 'tcp', host: world.public, port: 7001 },
    ]);
    assert.equal(p.metadata!.code, 'EHOSTUNREACH');
    assert.equal(p.public!.banner, `world ${world.public}:7001`);
    const list = await sb.admin(['nft', 'list', 'table', 'inet', 'parley_egress']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(
      list.stdout,
      /ip daddr @blocked4 counter packets [1-9]\d* bytes \d+ reject with icmpx admin-prohibited/,
      'still in place, and it has been refusing',
    );
    assert.doesNotMatch(list.stdout, /\n\s*accept\n/);
    const routes = await sb.run(['ip', '-4', 'route']);
    assert.match(routes.stdout, new RegExp(`default via ${EGRESS_NET.gateway.replace(/\./g, '\\.')} dev ${EGRESS_NET.iface}`));
  });

  test("a server on the sandbox's own loopback and address is reached by another of its processes, not by the host", async () => {
    const port = 20000 + Math.floor(Math.random() * 20000);
    const servers = [
      sb.spawn([process.execPath, PROBE_INSIDE, 'serve', '127.0.0.1', String(port)]),
      sb.spawn([process.execPath, PROBE_INSIDE, 'serve', '0.0.0.0', String(port + 1)]),
    ];
    try {
      for (const s of servers) await listening(s);
      const r = await sb.probe([
        { id: 'lo', kind: 'tcp', host: '127.0.0.1', port },
        { id: 'own', kind: 'tcp', host: EGRESS_NET.address, port: port + 1 },
      ]);
      assert.equal(r.lo!.banner, `sandbox 127.0.0.1:${port}`);
      assert.equal(r.own!.banner, `sandbox 0.0.0.0:${port + 1}`);
      // nothing is forwarded in: the host does not reach them on its loopback or its addresses
      const fromHost = await probeFromHost(uid, [
        { id: 'lo', kind: 'tcp', host: '127.0.0.1', port },
        { id: 'any', kind: 'tcp', host: '127.0.0.1', port: port + 1 },
        ...hostTargets().map((t, i) => ({ id: `h${i}`, kind: 'tcp' as const, host: t.onHost, port: port + 1 })),
      ]);
      for (const [id, v] of Object.entries(fromHost)) assert.ok(!v.banner?.startsWith('sandbox'), `${id}: ${JSON.stringify(v)}`);
    } finally {
      for (const s of servers) {
        s.stdin!.end();
        await collect(s);
      }
    }
  });

  test('allowed entries: the listed address and port are reached (TCP and UDP), its other ports and everything else are not', async () => {
    const b = world.blocked;
    const { sb: allowed } = await sandboxWithEgress(`${b.ten}:7001, ${b.metadata}`);
    const before = world.seen.length;
    const r = await allowed.probe([
      { id: 'ten tcp', kind: 'tcp', host: b.ten, port: 7001 },
      { id: 'ten udp', kind: 'udp', host: b.ten, port: 7001 },
      { id: 'metadata 7001', kind: 'tcp', host: b.metadata, port: 7001 },
      { id: 'metadata 7002', kind: 'tcp', host: b.metadata, port: 7002 },
      { id: 'ten 7002', kind: 'tcp', host: b.ten, port: 7002 },
      { id: 'ten udp 7002', kind: 'udp', host: b.ten, port: 7002 },
      { id: '192', kind: 'tcp', host: b.oneNineTwo, port: 7001 },
      { id: '172', kind: 'tcp', host: b.oneSevenTwo, port: 7001 },
      { id: 'gateway', kind: 'tcp', host: EGRESS_NET.gateway, port: hostSrv.anyPort },
      ...hostTargets().map((t, i) => ({ id: `host ${i}`, kind: 'tcp' as const, host: t.inSandbox, port: hostSrv.anyPort })),
    ]);
    assert.equal(r['ten tcp']!.banner, `world ${b.ten}:7001`);
    assert.equal(r['ten udp']!.banner, `world ${b.ten}:7001`);
    assert.equal(r['metadata 7001']!.banner, `world ${b.metadata}:7001`);
    assert.equal(r['metadata 7002']!.banner, `world ${b.metadata}:7002`);
    for (const [id, v] of Object.entries(r)) if (!/^(ten (tcp|udp)|metadata)/.test(id)) assert.equal(v.ok, false, `${id}: ${JSON.stringify(v)}`);
    const seen = world.seen.slice(before);
    assert.deepEqual(seen.map((s) => s.local).sort(), [`${b.ten}:7001`, `${b.ten}:7001`, `${b.metadata}:7001`, `${b.metadata}:7002`].sort());
    assert.ok(seen.every((s) => s.remote === world.hostSide));
  });

  test('127.0.0.1:PORT allowed: that one host loopback service at the gateway, no other port (the filter alone keeps them)', async () => {
    const { sb: allowed } = await sandboxWithEgress(`127.0.0.1:${hostSrv.loopbackPort}`);
    const before = hostSrv.seen.length;
    const r = await allowed.probe([
      { id: 'allowed', kind: 'tcp', host: EGRESS_NET.gateway, port: hostSrv.loopbackPort },
      { id: 'other', kind: 'tcp', host: EGRESS_NET.gateway, port: hostSrv.anyPort },
      { id: 'postgres', kind: 'tcp', host: EGRESS_NET.gateway, port: 5432 },
      { id: 'nats', kind: 'tcp', host: EGRESS_NET.gateway, port: 4222 },
      { id: 'udp', kind: 'udp', host: EGRESS_NET.gateway, port: hostSrv.udpPort },
      { id: 'own loopback', kind: 'tcp', host: '127.0.0.1', port: hostSrv.loopbackPort },
      { id: 'metadata', kind: 'tcp', host: world.blocked.metadata, port: 7001 },
    ]);
    assert.equal(r.allowed!.banner, 'host loopback', JSON.stringify(r.allowed));
    // refused by the filter: at once, "administratively prohibited" (a UDP send fails with EPERM)
    for (const id of ['other', 'postgres', 'nats']) assert.equal(r[id]!.code, 'EHOSTUNREACH', `${id}: ${JSON.stringify(r[id])}`);
    assert.equal(r.udp!.code, 'EPERM', JSON.stringify(r.udp));
    for (const id of ['own loopback', 'metadata']) assert.equal(r[id]!.ok, false, id);
    assert.deepEqual(hostSrv.seen.slice(before), [{ server: 'loopback', remote: '127.0.0.1' }]);
  });

  test('with everything outside allowed (0.0.0.0/0) and one host loopback port, the rest of the host loopback stays closed', async () => {
    const { sb: allowed } = await sandboxWithEgress(`0.0.0.0/0, 127.0.0.1:${hostSrv.loopbackPort}`);
    const worldBefore = world.seen.length;
    const hostBefore = hostSrv.seen.length;
    const r = await allowed.probe([
      { id: 'allowed', kind: 'tcp', host: EGRESS_NET.gateway, port: hostSrv.loopbackPort },
      { id: 'metadata', kind: 'tcp', host: world.blocked.metadata, port: 7001 },
      { id: 'other', kind: 'tcp', host: EGRESS_NET.gateway, port: hostSrv.anyPort },
      { id: 'gateway udp', kind: 'udp', host: EGRESS_NET.gateway, port: hostSrv.udpPort },
      // libslirp sends UDP broadcast to the host's loopback when the gateway maps there
      { id: 'broadcast', kind: 'udp', host: '255.255.255.255', port: hostSrv.udpPort },
      { id: 'dns other port', kind: 'udp', host: EGRESS_NET.dns, port: hostSrv.udpPort },
    ]);
    assert.equal(r.allowed!.banner, 'host loopback');
    assert.equal(r.metadata!.banner, `world ${world.blocked.metadata}:7001`, 'the operator opened it');
    for (const id of ['other', 'gateway udp', 'broadcast', 'dns other port']) assert.equal(r[id]!.ok, false, `${id}: ${JSON.stringify(r[id])}`);
    assert.equal(r.other!.code, 'EHOSTUNREACH');
    assert.deepEqual(hostSrv.seen.slice(hostBefore), [{ server: 'loopback', remote: '127.0.0.1' }]);
    assert.deepEqual(
      world.seen.slice(worldBefore).map((s) => s.local),
      [`${world.blocked.metadata}:7001`],
    );
  });

  test('an agent that kills every process it can see does not reach slirp4netns', async () => {
    const { sb: victim, egress: e } = await sandboxWithEgress();
    const ps = await victim.run(['/bin/sh', '-c', 'cat /proc/[0-9]*/cmdline | tr "\\0" " "']);
    assert.doesNotMatch(ps.stdout, /slirp4netns|nsenter/);
    await victim.run(['/bin/sh', '-c', `kill -KILL -1; kill -KILL ${e.pid}; true`]);
    assert.ok(fs.existsSync(`/proc/${e.pid}`) && /slirp4netns/.test(fs.readFileSync(`/proc/${e.pid}/cmdline`, 'utf8')), 'slirp4netns still runs');
    await e.close();
    assert.ok(!processesOf(uid).some((p) => p.pid === e.pid));
  });

  test('a failed attach says why in one line and leaves no process behind', async () => {
    const slirps = () =>
      processesOf(uid)
        .filter((p) => /slirp4netns/.test(p.cmd))
        .map((p) => p.pid)
        .sort();
    const running = slirps();
    const oneLine = (re: RegExp) => (e: Error) => re.test(e.message) && e.message.startsWith('egress: ') && !e.message.includes('\n');
    // a second attach to the same namespace: its tap device is taken, and its filter (which would
    // allow the metadata address) is refused as a whole: the first one stays
    await assert.rejects(
      attachEgress({ userns: sb.userns, netns: sb.netns, runAs, allow: parseAllowNets(world.blocked.metadata) }),
      oneLine(/slirp4netns exited \(ioctl\(TUNSETIFF\): Device or resource busy\)/),
    );
    const list = await sb.admin(['nft', 'list', 'ruleset']);
    assert.equal(list.stdout.match(/table inet parley_egress/g)?.length, 1, list.stdout);
    assert.doesNotMatch(list.stdout, /169\.254\.169\.254/);
    await assert.rejects(attachEgress({ userns: sb.userns, netns: sb.netns, runAs, allow: [], timeoutMs: 1 }), oneLine(/not ready in time|busy/));
    await assert.rejects(
      attachEgress({ userns: '/proc/999999999/ns/user', netns: sb.netns, runAs, allow: [] }),
      oneLine(/user namespace could not be opened \(ENOENT\)/),
    );
    // the daemon is root here: never run as host root
    await assert.rejects(
      attachEgress({ userns: sb.userns, netns: sb.netns, allow: [] }),
      oneLine(/daemon runs as root: egress needs the sandbox's unprivileged uid/),
    );
    await assert.rejects(
      attachEgress({ userns: sb.userns, netns: sb.netns, runAs: { uid: 0, gid: 0 }, allow: [] }),
      oneLine(/unprivileged uid and gid, not 0:0/),
    );
    // another uid cannot enter the sandbox's user namespace
    await assert.rejects(
      attachEgress({ userns: sb.userns, netns: sb.netns, runAs: { uid: uid + 1, gid: uid + 1 }, allow: [] }),
      oneLine(/Operation not permitted/),
    );
    assert.deepEqual(slirps(), running);
    assert.deepEqual(processesOf(uid + 1), []);
    assert.deepEqual(
      processesOf(uid).filter((p) => /^(\S*\/)?(nft|nsenter) /.test(p.cmd)),
      [],
      'no filter step is left either',
    );
    // the sandbox still has its network, and its filter
    const r = await sb.probe([
      { id: 'public', kind: 'tcp', host: world.public, port: 7001 },
      { id: 'metadata', kind: 'tcp', host: world.blocked.metadata, port: 7001 },
    ]);
    assert.equal(r.public!.banner, `world ${world.public}:7001`);
    assert.equal(r.metadata!.code, 'EHOSTUNREACH');
  });

  test('a daemon that is not root attaches as its own uid, without runAs', async () => {
    const own = await startSandbox(uid, { resolvConf: EGRESS_RESOLV_CONF });
    sandboxes.push(own);
    // the checkout where the uid can read it (a clone may sit in a directory only its owner can enter):
    // bound, in a mount namespace of the child's own, on an empty directory under /var/lib
    const app = fs.mkdtempSync('/var/lib/parley-net-app-');
    fs.chmodSync(app, 0o755);
    try {
      const script = `
        import { attachEgress } from ${JSON.stringify(`${app}/src/sandbox/network.ts`)};
        const e = await attachEgress({ userns: ${JSON.stringify(own.userns)}, netns: ${JSON.stringify(own.netns)}, allow: [] });
        process.stdout.write('attached ' + e.pid + '\\n');
        process.stdin.resume();
        process.stdin.on('end', async () => { await e.close(); process.stdout.write('closed\\n'); });
      `;
      const child = spawn(
        'unshare',
        [
          '--mount',
          '--propagation',
          'private',
          'sh',
          '-c',
          'mount --bind "$1" "$2" && cd "$2" && shift 2 && exec "$@"',
          'sh',
          ROOT,
          app,
          'setpriv',
          '--reuid',
          String(uid),
          '--regid',
          String(uid),
          '--clear-groups',
          '--',
          process.execPath,
          '--import',
          'tsx',
          '--input-type=module',
          '-e',
          script,
        ],
        {
          cwd: ROOT,
          env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: '/tmp' },
          stdio: ['pipe', 'pipe', 'pipe'],
          detached: true,
        },
      );
      const done = collect(child, 60_000);
      const line = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout!.on('data', (d: Buffer) => {
          out += d.toString('utf8');
          if (out.includes('\n')) resolve(out.trim());
        });
        child.once('close', () => reject(new Error('the daemon-like child ended before attaching')));
      }).catch(async (e: Error) => {
        const r = await done;
        throw new Error(`${e.message}: ${r.stderr.trim()}`);
      });
      const pid = Number(/^attached (\d+)$/.exec(line)?.[1]);
      assert.ok(pid > 0, line);
      assert.match(fs.readFileSync(`/proc/${pid}/status`, 'utf8'), new RegExp(`^Uid:\\s+${uid}\\s`, 'm'));
      const r = await own.probe([
        { id: 'public', kind: 'tcp', host: world.public, port: 7001 },
        { id: 'metadata', kind: 'tcp', host: world.blocked.metadata, port: 7001 },
        { id: 'gateway', kind: 'tcp', host: EGRESS_NET.gateway, port: hostSrv.loopbackPort },
      ]);
      assert.equal(r.public!.banner, `world ${world.public}:7001`);
      assert.equal(r.metadata!.code, 'EHOSTUNREACH');
      assert.equal(r.gateway!.code, 'EHOSTUNREACH');
      child.stdin!.end();
      const end = await done;
      assert.match(end.stdout, /closed/, end.stderr);
      assert.ok(!fs.existsSync(`/proc/${pid}`) || /^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8')));
    } finally {
      fs.rmdirSync(app);
    }
  });

  test('slirp4netns ends with the daemon: its --exit-fd is a socket only the daemon holds', async () => {
    const own = await startSandbox(uid);
    sandboxes.push(own);
    const script = `
      import { attachEgress } from ${JSON.stringify(`${ROOT}/src/sandbox/network.ts`)};
      const e = await attachEgress({
        userns: ${JSON.stringify(own.userns)},
        netns: ${JSON.stringify(own.netns)},
        runAs: { uid: ${uid}, gid: ${uid} },
        allow: [],
      });
      process.stdout.write('attached ' + e.pid + '\\n');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const done = collect(child, 60_000);
    const line = await new Promise<string>((resolve) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString('utf8');
        if (out.includes('\n')) resolve(out.trim());
      });
      child.once('close', () => resolve(out));
    });
    const pid = Number(/^attached (\d+)$/.exec(line)?.[1]);
    assert.ok(pid > 0, `${line} ${(await Promise.race([done, Promise.resolve(null)]))?.stderr ?? ''}`);
    child.kill('SIGKILL');
    await done;
    await waitUntil(() => !fs.existsSync(`/proc/${pid}`) || /^State:\s+Z/m.test(readOr(`/proc/${pid}/status`)), 'slirp4netns exits after the daemon is killed');
  });

  test('probeEgress: slirp4netns found and attached for real; as root without a uid to run as, a one-line reason', async () => {
    const p = await probeEgress({ runAs });
    assert.equal(p.usable, true, JSON.stringify(p));
    if (p.usable) {
      assert.equal(p.tool, 'slirp4netns');
      assert.match(p.version, /^\d+\.\d+\.\d+$/);
    }
    const q = await probeEgress();
    assert.equal(q.usable, false);
    if (!q.usable) assert.match(q.reason, /^the daemon runs as root: .*SANDBOX_UID/);
  });

  test('closing every handle and sandbox leaves no process of the sandbox uid; the test network goes with remove()', async () => {
    await Promise.all(handles.map((h) => h.close()));
    for (const h of handles) assert.ok(!fs.existsSync(`/proc/${h.pid}`) || /^State:\s+Z/m.test(readOr(`/proc/${h.pid}/status`)));
    await Promise.all(sandboxes.map((s) => s.close()));
    await waitUntil(() => processesOf(uid).length === 0, `no process of uid ${uid} (${JSON.stringify(processesOf(uid))})`);
    await world.remove();
    assert.deepEqual(testNetLeft(world), []);
  });
});

// ------------------------------------------------------------------ helpers

function hostPort(host: string, port: number): string {
  return net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

function ifaceOf(address: string): string {
  for (const [name, list] of Object.entries(os.networkInterfaces())) if ((list ?? []).some((i) => i.address === address)) return name;
  return 'lo';
}

function isPrivate4(a: string): boolean {
  const bl = new net.BlockList();
  for (const [n, p] of [
    ['10.0.0.0', 8],
    ['172.16.0.0', 12],
    ['192.168.0.0', 16],
    ['100.64.0.0', 10],
    ['169.254.0.0', 16],
  ] as const)
    bl.addSubnet(n, p);
  return bl.check(a);
}

function resolvConfHasIPv4(): boolean {
  try {
    return /^\s*nameserver\s+(?!127\.)\d+\.\d+\.\d+\.\d+\s*$/m.test(fs.readFileSync('/etc/resolv.conf', 'utf8'));
  } catch {
    return false;
  }
}

function readOr(p: string): string {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}

async function waitUntil(fn: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function listening(child: ReturnType<typeof spawn>): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString('utf8')));
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      if (out.includes('listening')) resolve();
    });
    child.once('close', (code) => reject(new Error(`the server ended (${code}): ${err.trim()}`)));
  });
}

interface HostServers {
  loopbackPort: number;
  anyPort: number;
  udpPort: number;
  /** Every connection or datagram they got. */
  seen: { server: string; remote: string }[];
  close(): Promise<void>;
}

/**
 * Servers on the host: TCP on 127.0.0.1 only ("host loopback"), TCP on every address, IPv4 and
 * IPv6 ("host any"), UDP on every address (echo).
 */
async function startHostServers(): Promise<HostServers> {
  const seen: HostServers['seen'] = [];
  const tcp = (banner: string, server: string) =>
    net.createServer((s) => {
      seen.push({ server, remote: (s.remoteAddress ?? '').replace(/^::ffff:/, '') });
      s.end(`${banner}\n`);
    });
  const loopback = tcp('host loopback', 'loopback');
  const any = tcp('host any', 'any');
  await new Promise<void>((r) => loopback.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => any.listen({ port: 0, host: '::', ipv6Only: false }, r));
  const udp = dgram.createSocket({ type: 'udp6', ipv6Only: false });
  udp.on('message', (_m, from) => {
    seen.push({ server: 'udp', remote: from.address.replace(/^::ffff:/, '') });
    udp.send('host udp\n', from.port, from.address);
  });
  await new Promise<void>((r) => udp.bind(0, '::', r));
  return {
    loopbackPort: (loopback.address() as net.AddressInfo).port,
    anyPort: (any.address() as net.AddressInfo).port,
    udpPort: udp.address().port,
    seen,
    close: async () => {
      udp.close();
      await Promise.all([loopback, any].map((s) => new Promise((r) => s.close(r))));
    },
  };
}
