import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/** AES-256-GCM with a key from SECRET_KEY (any string, hashed) or a generated 0600 key file in DATA_DIR. */
export class SecretBox {
  private constructor(private readonly key: Buffer) {}

  static open(dataDir: string, secretKey?: string): SecretBox {
    if (secretKey) return new SecretBox(crypto.createHash('sha256').update(secretKey).digest());
    const file = path.join(dataDir, 'secret.key');
    try {
      const raw = fs.readFileSync(file);
      if (raw.length === 32) return new SecretBox(raw);
      throw new Error(`${file} is not a 32-byte key`);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const key = crypto.randomBytes(32);
    fs.writeFileSync(file, key, { mode: 0o600, flag: 'wx' });
    return new SecretBox(key);
  }

  /** A key for another purpose, derived from this one (HKDF-SHA256): the same on every node that shares SECRET_KEY. */
  derive(purpose: string): Buffer {
    return Buffer.from(crypto.hkdfSync('sha256', this.key, Buffer.alloc(0), purpose, 32));
  }

  /** Returns `v1:<iv>:<tag>:<ciphertext>` (base64 parts). */
  encrypt(plain: string): string {
    const iv = crypto.randomBytes(12);
    const c = crypto.createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return ['v1', iv.toString('base64'), c.getAuthTag().toString('base64'), body.toString('base64')].join(':');
  }

  decrypt(sealed: string): string {
    const [v, iv, tag, body] = sealed.split(':');
    if (v !== 'v1' || !iv || !tag || body === undefined) throw new Error('unreadable sealed value');
    const d = crypto.createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64'));
    d.setAuthTag(Buffer.from(tag, 'base64'));
    return Buffer.concat([d.update(Buffer.from(body, 'base64')), d.final()]).toString('utf8');
  }
}
