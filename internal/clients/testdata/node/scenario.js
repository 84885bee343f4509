// Runs testdata/scenario.tsv, or a pipelined burst, with node's mysql2 and
// prints a canonical transcript of what the driver reports (see
// internal/clients). Run from this directory (mysql2 is in node_modules,
// installed by scripts/deps-clients.sh): node scenario.js
//
// Environment: SP_HOST, SP_PORT, SP_USER, SP_PASSWORD, SP_DATABASE,
// SP_SCENARIO and SP_MODE, one of
//   query      connection.query(): text protocol, parameters interpolated
//              by mysql2
//   execute    connection.execute() for prepare steps: server-side
//              prepared statements; JS numbers are sent as DOUBLE
//   pipelined  a burst of increments, reads and inserts, all issued at
//              once on one connection (many promises in flight), awaited
//              together, then the totals
//
// After a step that broke the connection (an error without a server error
// number, or a fatal one), the program reconnects, prints "reconnected"
// and goes on.

'use strict';

const fs = require('fs');
const util = require('util');
const mysql = require('mysql2/promise');

function out(line) {
  process.stdout.write(line + '\n');
}

function env(name) {
  const v = process.env[name];
  if (v === undefined) {
    process.stderr.write(`missing environment variable ${name}\n`);
    process.exit(2);
  }
  return v;
}

function val(v) {
  return util.inspect(v, { depth: 3, breakLength: Infinity });
}

function scenario(path) {
  const steps = [];
  for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const f = line.split('\t');
    const params = f.slice(2).map((p) => {
      const [kind, v] = [p[0], p.slice(2)];
      return kind === 'i' ? Number(v) : kind === 's' ? v : null;
    });
    steps.push({ kind: f[0], sql: f[1] || '', params });
  }
  return steps;
}

function connect() {
  return mysql.createConnection({
    host: env('SP_HOST'),
    port: Number(env('SP_PORT')),
    user: env('SP_USER'),
    password: env('SP_PASSWORD'),
    database: env('SP_DATABASE'),
    supportBigNumbers: true,
  });
}

function printFields(fields) {
  for (const f of fields) {
    out(`meta name=${f.name} orgName=${f.orgName} table=${f.table} orgTable=${f.orgTable} schema=${f.schema} ` +
        `columnType=${f.columnType} type=${f.type} columnLength=${f.columnLength} flags=${f.flags} ` +
        `decimals=${f.decimals} characterSet=${f.characterSet} encoding=${f.encoding}`);
  }
}

// printResult prints what query() or execute() resolved to.
function printResult([result, fields]) {
  if (Array.isArray(result)) {
    printFields(fields || []);
    for (const row of result) {
      out('row ' + row.map(val).join(' | '));
    }
    out(`rows ${result.length}`);
    return;
  }
  const h = result;
  out(`ok affectedRows=${h.affectedRows} insertId=${h.insertId} warningStatus=${h.warningStatus} ` +
      `changedRows=${h.changedRows} info=${val(h.info)} serverStatus=${h.serverStatus} fieldCount=${h.fieldCount}`);
}

function printError(e) {
  out(`error ${e.errno} ${e.sqlState} ${e.code} ${e.sqlMessage || e.message}${e.fatal ? ' (fatal)' : ''}`);
  return e.fatal || !e.sqlState;
}

async function runScenario(mode) {
  const steps = scenario(env('SP_SCENARIO'));
  let conn = await connect();
  let broken = false;
  for (let i = 0; i < steps.length; i++) {
    const s = steps[i];
    if (broken) {
      try {
        conn.destroy();
      } catch (e) {
        // gone either way
      }
      conn = await connect();
      out('reconnected');
      broken = false;
    }
    out(`> ${i + 1} ${s.kind} ${s.sql}${s.params.length ? ' ' + val(s.params) : ''}`);
    try {
      switch (s.kind) {
        case 'begin':
          await conn.beginTransaction();
          out('ok');
          break;
        case 'commit':
          await conn.commit();
          out('ok');
          break;
        case 'rollback':
          await conn.rollback();
          out('ok');
          break;
        case 'prepare':
          printResult(await (mode === 'execute' ? conn.execute(s.sql, s.params) : conn.query({ sql: s.sql, rowsAsArray: true }, s.params)));
          break;
        case 'query':
          printResult(await conn.query({ sql: s.sql, rowsAsArray: true }));
          break;
        default:
          throw new Error(`unknown step ${s.kind}`);
      }
    } catch (e) {
      broken = printError(e);
    }
  }
  await conn.end();
}

// runPipelined issues a burst of statements on one connection without
// waiting between them, then prints every outcome in order.
async function runPipelined() {
  const conn = await connect();
  const burst = [];
  const add = (what, p) => burst.push([what, p]);
  for (let i = 0; i < 600; i++) {
    const id = i % 50 === 49 ? 999 : 1 + (i % 4);
    switch (i % 6) {
      case 0:
        add(`query increment id=${id}`, conn.query(`UPDATE repos SET downloads = downloads + 1 WHERE id = ${id}`));
        break;
      case 1:
        add(`execute increment id=${id}`, conn.execute('UPDATE repos SET downloads = downloads + ? WHERE id = ?', [2, id]));
        break;
      case 2:
        add(`execute read id=${id}`, conn.execute({ sql: 'SELECT downloads, stars FROM repos WHERE id = ?', rowsAsArray: true }, [id]));
        break;
      case 3:
        add('query insert', conn.query(`INSERT INTO events (repo_id, kind) VALUES (${id}, 'burst')`));
        break;
      case 4:
        add(`execute two counters id=${id}`, conn.execute('UPDATE repos SET downloads = downloads + ?, stars = stars + ? WHERE id = ?', [1, 1, id]));
        break;
      case 5:
        add(i % 60 === 5 ? 'query error' : 'query plain read',
            conn.query({ sql: i % 60 === 5 ? 'SELECT nope FROM users' : `SELECT name FROM users WHERE id = ${1 + (i % 3)}`, rowsAsArray: true }));
        break;
    }
  }
  const settled = await Promise.allSettled(burst.map(([, p]) => p));
  settled.forEach((r, i) => {
    out(`> ${i + 1} ${burst[i][0]}`);
    if (r.status === 'fulfilled') {
      printResult(r.value);
    } else {
      printError(r.reason);
    }
  });
  for (const q of ['SELECT id, downloads, stars FROM repos ORDER BY id', 'SELECT COUNT(*), SUM(repo_id) FROM events']) {
    out(`> ${q}`);
    printResult(await conn.query({ sql: q, rowsAsArray: true }));
  }
  await conn.end();
}

async function main() {
  const mode = env('SP_MODE');
  if (mode === 'pipelined') {
    await runPipelined();
  } else if (mode === 'query' || mode === 'execute') {
    await runScenario(mode);
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  out('done');
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
