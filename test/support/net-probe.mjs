/**
 * Network probes for test/sandbox-network.test.ts, plain JavaScript so that it runs anywhere
 * (inside a sandbox as its unprivileged uid, or in the test's network namespace as root):
 *
 *   net-probe.mjs probe '<json: [{id, kind: tcp|udp|dns, host, port, name}]>'
 *     tries each at once; prints one JSON object {id: {ok, banner?, code?}} and exits.
 *     tcp: connected, then the first line the server sends (its banner) or '' after a while;
 *     udp: sends "ping" on a connected socket, ok with the reply; dns: resolve4(name) with the
 *     resolver of /etc/resolv.conf, ok with the addresses.
 *   net-probe.mjs serve HOST PORT
 *     a TCP server that answers every connection with "sandbox HOST:PORT"; prints "listening",
 *     runs until stdin closes.
 *   net-probe.mjs world '<json: {tcp: [[host, port]...], udp: [[host, port]...], dns: {hosts, answer}}>'
 *     the test network's servers: each TCP server sends "world HOST:PORT" and each UDP one replies
 *     "world HOST:PORT"; the DNS servers answer every A query with `answer`. Prints "listening",
 *     then one JSON line per connection or datagram: {proto, local, remote}. Runs until stdin closes.
 */
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';

const [mode, ...args] = process.argv.slice(2);
const TIMEOUT_MS = 3000;

function hostPort(host, port) {
  return net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
}

function tcp({ host, port }) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port });
    let connected = false;
    let banner = '';
    const done = (r) => {
      clearTimeout(timer);
      s.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => done(connected ? { ok: true, banner } : { ok: false, code: 'TIMEOUT' }), TIMEOUT_MS);
    s.on('connect', () => (connected = true));
    s.on('data', (d) => {
      banner += d.toString('utf8');
      if (banner.includes('\n')) done({ ok: true, banner: banner.trim() });
    });
    s.on('error', (e) => done(connected ? { ok: true, banner } : { ok: false, code: e.code ?? e.message }));
    s.on('end', () => done(connected ? { ok: true, banner: banner.trim() } : { ok: false, code: 'EOF' }));
  });
}

function udp({ host, port }) {
  return new Promise((resolve) => {
    const s = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
    const done = (r) => {
      clearTimeout(timer);
      try {
        s.close();
      } catch {
        /* closed */
      }
      resolve(r);
    };
    const timer = setTimeout(() => done({ ok: false, code: 'TIMEOUT' }), TIMEOUT_MS);
    s.on('error', (e) => done({ ok: false, code: e.code ?? e.message }));
    s.on('message', (m) => done({ ok: true, banner: m.toString('utf8').trim() }));
    s.bind(0, () => {
      // what an agent does to send to a broadcast address (connect checks it)
      if (!net.isIPv6(host)) s.setBroadcast(true);
      s.connect(port, host, (err) => {
        if (err) return done({ ok: false, code: err.code ?? err.message });
        s.send('ping', (e) => {
          if (e) done({ ok: false, code: e.code ?? e.message });
        });
      });
    });
  });
}

async function lookup({ name }) {
  const resolver = new dns.promises.Resolver({ timeout: TIMEOUT_MS, tries: 1 });
  try {
    return { ok: true, banner: (await resolver.resolve4(name)).join(',') };
  } catch (e) {
    return { ok: false, code: e.code ?? e.message };
  }
}

if (mode === 'probe') {
  const attempts = JSON.parse(args[0]);
  const kinds = { tcp, udp, dns: lookup };
  const results = await Promise.all(attempts.map((a) => kinds[a.kind](a)));
  const out = {};
  for (const [i, a] of attempts.entries()) out[a.id] = results[i];
  process.stdout.write(`${JSON.stringify(out)}\n`);
} else if (mode === 'serve') {
  const [host, port] = args;
  const server = net.createServer((s) => s.end(`sandbox ${hostPort(host, port)}\n`));
  server.listen(Number(port), host, () => process.stdout.write('listening\n'));
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
} else if (mode === 'world') {
  const config = JSON.parse(args[0]);
  const log = (proto, local, remote) => process.stdout.write(`${JSON.stringify({ proto, local, remote })}\n`);
  const waits = [];
  for (const [host, port] of config.tcp) {
    const server = net.createServer((s) => {
      log('tcp', hostPort(host, port), s.remoteAddress);
      s.end(`world ${hostPort(host, port)}\n`);
    });
    waits.push(new Promise((r) => server.listen({ host, port, ipv6Only: true }, r)));
  }
  for (const [host, port] of config.udp) {
    const s = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
    s.on('message', (_m, from) => {
      log('udp', hostPort(host, port), from.address);
      s.send(`world ${hostPort(host, port)}\n`, from.port, from.address);
    });
    waits.push(new Promise((r) => s.bind(port, host, r)));
  }
  for (const host of config.dns?.hosts ?? []) {
    const s = dgram.createSocket('udp4');
    s.on('message', (q, from) => {
      log('dns', `${host}:53`, from.address);
      s.send(dnsAnswer(q, config.dns.answer), from.port, from.address);
    });
    waits.push(new Promise((r) => s.bind(53, host, r)));
  }
  await Promise.all(waits);
  process.stdout.write('listening\n');
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
} else {
  process.stderr.write(`usage: net-probe.mjs probe|serve|world …\n`);
  process.exit(2);
}

/** A DNS response to query `q`: for an A question, one answer `address`; otherwise no answer. */
function dnsAnswer(q, address) {
  let end = 12;
  while (end < q.length && q[end] !== 0) end += q[end] + 1;
  const question = q.subarray(12, end + 5);
  const isA = q.readUInt16BE(end + 1) === 1;
  const header = Buffer.alloc(12);
  q.copy(header, 0, 0, 2);
  header.writeUInt16BE(0x8180, 2);
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(isA ? 1 : 0, 6);
  const answer = Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...address.split('.').map(Number)]);
  return Buffer.concat([header, question, ...(isA ? [answer] : [])]);
}
