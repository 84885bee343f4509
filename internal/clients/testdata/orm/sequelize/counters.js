// Sequelize's counter increments, run by the tests in
// internal/clients/orm_test.go.
//
// Usage: node counters.js, with sequelize and mysql2 from
// internal/clients/testdata/node/node_modules (scripts/deps-clients.sh). The
// environment says where to connect (SP_HOST, SP_PORT, SP_DATABASE, SP_USER,
// SP_PASSWORD) and what to do (SP_MODE):
//
// counters  SP_WORKERS concurrent workers (each on its own pooled
//           connection) each run SP_ITERATIONS increments, cycling through
//           the spellings below, then the totals are read back through the
//           ORM. Prints, per spelling and counter, "inc ID COLUMN DELTA SCOPE
//           CALLS AFFECTED" (SCOPE "-", "live": deleted_at IS NULL, or
//           "tenant=N"; AFFECTED "-" when the ORM does not report it), then
//           "total ID COLUMN VALUE" per row and counter.
// bench     SP_WORKERS workers run SP_BENCH_TX transactions in all, each an
//           increment of repo 1 (SP_BENCH_SPELLING "orm": Model.increment()
//           on the model with timestamps, "raw": the textbook SQL in the
//           same transaction) and SP_WORK_MS
//           of simulated work before COMMIT. Prints "bench TX SECONDS
//           RETRIES".
'use strict';

const path = require('path');
const { Sequelize, DataTypes } = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'sequelize'));

function env(name) {
  const v = process.env[name];
  if (v === undefined) {
    console.error(`counters.js: ${name} is not set`);
    process.exit(1);
  }
  return v;
}

const workers = Number(env('SP_WORKERS'));
const sequelize = new Sequelize(env('SP_DATABASE'), env('SP_USER'), env('SP_PASSWORD'), {
  host: env('SP_HOST'),
  port: Number(env('SP_PORT')),
  dialect: 'mysql',
  logging: false,
  pool: { max: workers, min: 0, acquire: 60000 },
});

const columns = {
  id: { type: DataTypes.BIGINT, primaryKey: true },
  name: DataTypes.STRING(100),
  downloads: { type: DataTypes.INTEGER, allowNull: false, defaultValue: 0 },
  stars: { type: DataTypes.INTEGER, allowNull: false, defaultValue: 0 },
  tenant_id: { type: DataTypes.INTEGER, allowNull: false, defaultValue: 1 },
};

// The model as most applications declare it: timestamps (increment() sets
// updated_at) and paranoid (soft deletes: every query adds deleted_at IS
// NULL).
const Repo = sequelize.define('Repo', columns, {
  tableName: 'repos', timestamps: true, createdAt: false, updatedAt: 'updated_at',
  paranoid: true, deletedAt: 'deleted_at',
});

// The same table without timestamps or soft deletes.
const PlainRepo = sequelize.define('PlainRepo', columns, { tableName: 'repos', timestamps: false });

// affectedOf returns the affected rows Model.increment() resolves to
// ([[rows, affected]] on MySQL), or null when it reports none.
function affectedOf(res) {
  if (Array.isArray(res) && Array.isArray(res[0]) && typeof res[0][1] === 'number') {
    return res[0][1];
  }
  return null;
}

// [name, [[id, column, delta, scope]], async function returning affected rows or null]
const spellings = [
  // Model.increment() sets updated_at but adds no paranoid clause (scope
  // "-"): it increments soft-deleted rows too.
  ['increment', [[1, 'downloads', 1, '-']], async () => affectedOf(await Repo.increment('downloads', { where: { id: 1 } }))],
  ['increment-by', [[1, 'downloads', 3, '-']], async () => affectedOf(await Repo.increment('downloads', { by: 3, where: { id: 1 } }))],
  ['increment-two', [[1, 'downloads', 1, '-'], [1, 'stars', 2, '-']],
    async () => affectedOf(await Repo.increment({ downloads: 1, stars: 2 }, { where: { id: 1 } }))],
  ['increment-soft-deleted-row', [[3, 'stars', 1, '-']], async () => affectedOf(await Repo.increment('stars', { where: { id: 3 } }))],
  ['instance-increment', [[1, 'downloads', 1, '-']], async () => {
    const repo = await Repo.findByPk(1);
    await repo.increment('downloads');
    return null;
  }],
  ['plain', [[1, 'downloads', 1, '-']], async () => affectedOf(await PlainRepo.increment('downloads', { where: { id: 1 } }))],
  ['plain-string-id', [[1, 'stars', 1, '-']], async () => affectedOf(await PlainRepo.increment('stars', { where: { id: '1' } }))],
  ['tenant', [[2, 'downloads', 1, 'tenant=7']],
    async () => affectedOf(await PlainRepo.increment('downloads', { where: { id: 2, tenant_id: 7 } }))],
  // The soft-delete scope spelled out, as applications do for increments.
  ['soft-delete', [[1, 'downloads', 1, 'live']],
    async () => affectedOf(await Repo.increment('downloads', { where: { id: 1, deleted_at: null } }))],
  ['soft-delete-deleted-row', [[3, 'downloads', 1, 'live']],
    async () => affectedOf(await Repo.increment('downloads', { where: { id: 3, deleted_at: null } }))],
];

async function counters() {
  const iterations = Number(env('SP_ITERATIONS'));
  const calls = spellings.map(() => 0);
  const affected = spellings.map(() => 0);
  const reported = spellings.map(() => true);
  await Promise.all(Array.from({ length: workers }, async (_, w) => {
    for (let i = 0; i < iterations; i++) {
      const s = (w + i) % spellings.length;
      const n = await spellings[s][2]();
      calls[s]++;
      if (n === null) {
        reported[s] = false;
      } else {
        affected[s] += n;
      }
    }
  }));
  spellings.forEach(([, incs], s) => {
    for (const [id, col, delta, scope] of incs) {
      console.log(`inc ${id} ${col} ${delta} ${scope} ${calls[s]} ${reported[s] ? affected[s] : '-'}`);
    }
  });
  for (const repo of await Repo.findAll({ paranoid: false, order: [['id', 'ASC']] })) {
    console.log(`total ${repo.id} downloads ${repo.downloads}`);
    console.log(`total ${repo.id} stars ${repo.stars}`);
  }
}

async function bench() {
  const total = Number(env('SP_BENCH_TX'));
  const workMs = Number(env('SP_WORK_MS'));
  const spelling = env('SP_BENCH_SPELLING');
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  let left = total;
  let retries = 0;
  // Open every pooled connection before the clock starts.
  await Promise.all(Array.from({ length: workers }, () => sequelize.transaction(async () => sleep(20))));
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: workers }, async () => {
    while (left > 0) {
      left--;
      for (;;) {
        try {
          await sequelize.transaction(async (transaction) => {
            if (spelling === 'orm') {
              await Repo.increment('downloads', { where: { id: 1 }, transaction });
            } else {
              await sequelize.query('UPDATE repos SET downloads = downloads + 1 WHERE id = 1', { transaction });
            }
            await sleep(workMs);
          });
          break;
        } catch (e) {
          const code = e.parent && e.parent.errno;
          if (code !== 1213 && code !== 1205) {
            throw e;
          }
          retries++;
        }
      }
    }
  }));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`bench ${total} ${seconds.toFixed(6)} ${retries}`);
}

({ counters, bench })[env('SP_MODE')]()
  .then(() => sequelize.close())
  .catch((e) => {
    console.error(e && e.stack ? e.stack : e);
    process.exit(1);
  });
