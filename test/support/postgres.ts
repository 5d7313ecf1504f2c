/**
 * A database of its own for each test on the PostgreSQL server of this machine (and CI):
 * PARLEY_TEST_PG (default postgres://postgres@127.0.0.1:5432/postgres) names the server.
 */
import crypto from 'node:crypto';
import pg from 'pg';

export const PG_ADMIN_URL = process.env.PARLEY_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: PG_ADMIN_URL, connectionTimeoutMillis: 5000 });
  try {
    await c.connect();
  } catch (err) {
    throw new Error(
      `PostgreSQL is unreachable at ${PG_ADMIN_URL.replace(/\/\/[^@]*@/, '//')} (${(err as Error).message}); these tests need it running (set ` +
        `PARLEY_TEST_PG to use another server)`,
    );
  }
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => {});
  }
}

/** Creates an empty database; `drop()` removes it (closing any connection still open to it). */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `parley_test_${crypto.randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: () => dropTestDatabase(url.toString()),
  };
}

export async function dropTestDatabase(url: string): Promise<void> {
  const name = new URL(url).pathname.slice(1);
  if (!/^parley_test_[0-9a-f]+$/.test(name)) throw new Error(`not a test database: ${name}`);
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
}
