/**
 * The rule for image URLs a message may carry: checked when the message arrives, so a
 * URL that will never be fetched is refused (422, with this rule) instead of failing every later
 * step. No AI SDK import here: the API layer loads this file at start-up.
 */
import { BlockList, isIP } from 'node:net';

const IMAGE_URL_RULE =
  'image URLs must be https://, http:// or data:image/…;base64 URLs of a public host ' +
  '(not localhost, *.local, *.internal, a loopback, private or link-local address)';

// built on the first check, not while the daemon starts
let blockList: BlockList | undefined;
function blocked(): BlockList {
  if (blockList) return blockList;
  const list = new BlockList();
  for (const [subnet, prefix] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.0.0.0', 24],
    ['192.168.0.0', 16],
    ['198.18.0.0', 15],
    ['224.0.0.0', 3],
  ] as const)
    list.addSubnet(subnet, prefix, 'ipv4');
  for (const [subnet, prefix] of [
    ['::', 127],
    ['fc00::', 7],
    ['fe80::', 10],
    ['ff00::', 8],
  ] as const)
    list.addSubnet(subnet, prefix, 'ipv6');
  return (blockList = list);
}

function privateAddress(host: string): boolean {
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  const v = isIP(bare);
  if (v === 4) return blocked().check(bare, 'ipv4');
  if (v === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
    if (mapped) return blocked().check(mapped[1]!, 'ipv4');
    // ::ffff:7f00:1 (the URL parser's form of ::ffff:127.0.0.1)
    const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(bare);
    if (hex) {
      const n = (parseInt(hex[1]!, 16) << 16) | parseInt(hex[2]!, 16);
      return blocked().check([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.'), 'ipv4');
    }
    return blocked().check(bare, 'ipv6');
  }
  return false;
}

/** Why an image URL will never be fetched, or null when it may be. */
export function imageUrlProblem(url: string): string | null {
  if (url.startsWith('data:')) {
    return /^data:image\/[a-z0-9.+-]+(;[a-z0-9=.+-]+)*;base64,/i.test(url) ? null : `a data URL must be data:image/<type>;base64,…: ${IMAGE_URL_RULE}`;
  }
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `not a URL: ${IMAGE_URL_RULE}`;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return `scheme ${u.protocol} is never fetched: ${IMAGE_URL_RULE}`;
  const host = u.hostname.toLowerCase().replace(/\.+$/, '');
  if (!host || host === 'localhost' || /\.(local|localhost|internal)$/.test(host) || privateAddress(host)) {
    return `${host || 'an empty host'} is never fetched: ${IMAGE_URL_RULE}`;
  }
  return null;
}
