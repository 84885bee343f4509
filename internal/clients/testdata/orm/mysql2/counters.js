// node mysql2's prepared increments (execute(): server-side prepares, JS
// numbers sent as DOUBLE parameters), run by the tests in
// internal/clients/orm_test.go.
//
// Usage: node counters.js, with mysql2 from
// internal/clients/testdata/node/node_modules (scripts/deps-clients.sh). The
// environment says where to connect (SP_HOST, SP_PORT, SP_DATABASE, SP_USER,
// SP_PASSWORD) and what to do: SP_WORKERS concurrent workers (each on its own
// pooled connection) each run SP_ITERATIONS increments, cycling through the
// spellings below, then the totals are read back. Prints, per spelling and
// counter, "inc ID COLUMN DELTA SCOPE CALLS AFFECTED" (SCOPE "-" or
// "tenant=N"), then "total ID COLUMN VALUE" per row and counter.
// SP_SPELLINGS, when set, is a comma-separated list of the spellings to run.
'use strict';

const path = require('path');
const mysql = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'mysql2', 'promise'));

function env(name) {
  const v = process.env[name];
  if (v === undefined) {
    console.error(`counters.js: ${name} is not set`);
    process.exit(1);
  }
  return v;
}

// [name, [[id, column, delta, scope]], async function(conn) returning affected rows]
const allSpellings = [
  ['execute-key', [[1, 'downloads', 1, '-']],
    async (c) => (await c.execute('UPDATE repos SET downloads = downloads + 1 WHERE id = ?', [1]))[0].affectedRows],
  ['execute-delta-key', [[1, 'downloads', 2, '-']],
    async (c) => (await c.execute('UPDATE repos SET downloads = downloads + ? WHERE id = ?', [2, 1]))[0].affectedRows],
  ['execute-string-key', [[1, 'stars', 1, '-']],
    async (c) => (await c.execute('UPDATE repos SET stars = stars + ? WHERE id = ?', [1, '1']))[0].affectedRows],
  ['execute-bigint-key', [[1, 'stars', 1, '-']],
    async (c) => (await c.execute('UPDATE repos SET stars = stars + 1 WHERE id = ?', [1n]))[0].affectedRows],
  ['execute-tenant', [[2, 'downloads', 1, 'tenant=7']],
    async (c) => (await c.execute('UPDATE repos SET downloads = downloads + 1 WHERE id = ? AND tenant_id = ?', [2, 7]))[0].affectedRows],
  // The textbook spelling over the text protocol: the control, slotted
  // before ORM spellings were.
  ['query', [[1, 'downloads', 1, '-']],
    async (c) => (await c.query('UPDATE repos SET downloads = downloads + 1 WHERE id = ?', [1]))[0].affectedRows],
];
const only = process.env.SP_SPELLINGS ? process.env.SP_SPELLINGS.split(',') : null;
const spellings = only ? allSpellings.filter(([name]) => only.includes(name)) : allSpellings;
if (only && spellings.length !== only.length) {
  console.error(`counters.js: unknown spelling in SP_SPELLINGS=${process.env.SP_SPELLINGS}`);
  process.exit(1);
}

async function main() {
  const workers = Number(env('SP_WORKERS'));
  const iterations = Number(env('SP_ITERATIONS'));
  const pool = mysql.createPool({
    host: env('SP_HOST'), port: Number(env('SP_PORT')), user: env('SP_USER'), password: env('SP_PASSWORD'),
    database: env('SP_DATABASE'), connectionLimit: workers, supportBigNumbers: true,
  });
  const calls = spellings.map(() => 0);
  const affected = spellings.map(() => 0);
  await Promise.all(Array.from({ length: workers }, async (_, w) => {
    const conn = await pool.getConnection();
    try {
      for (let i = 0; i < iterations; i++) {
        const s = (w + i) % spellings.length;
        const n = await spellings[s][2](conn);
        affected[s] += n;
        calls[s]++;
      }
    } finally {
      conn.release();
    }
  }));
  spellings.forEach(([, incs], s) => {
    for (const [id, col, delta, scope] of incs) {
      console.log(`inc ${id} ${col} ${delta} ${scope} ${calls[s]} ${affected[s]}`);
    }
  });
  const [rows] = await pool.execute('SELECT id, downloads, stars FROM repos ORDER BY id');
  for (const r of rows) {
    console.log(`total ${r.id} downloads ${r.downloads}`);
    console.log(`total ${r.id} stars ${r.stars}`);
  }
  await pool.end();
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
