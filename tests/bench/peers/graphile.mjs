// graphile-worker's side of the job backbone benchmark (tests/bench/backbone.py).
//
//   node graphile.mjs migrate
//   node graphile.mjs enqueue --jobs N
//   node graphile.mjs enqueue --rate R --seconds S --log FILE
//   node graphile.mjs work --log FILE [--batched]
//
// At a rate, jobs are added one at a time with `addJob` (its own transaction
// each), as an application would; a prefill of N jobs uses `addJobs`. The task appends "<job id> <µs since the epoch>" to the
// log and returns. `--batched` turns on the local queue and batched completion.
// DATABASE_URL names the database.
import { appendFileSync, openSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const args = process.argv.slice(2);
const value = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const connectionString = process.env.DATABASE_URL;
const nowMicros = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const CONCURRENCY = 16;
// Warnings and errors only, as the other systems run (per-job lines cost time).
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[${level}] ${message}`);
});

async function enqueue() {
  const utils = await makeWorkerUtils({ connectionString, maxPoolSize: 20, logger });
  const logPath = value("--log");
  const log = logPath ? openSync(logPath, "a") : null;
  const addOne = async (i) => {
    const job = await utils.addJob("noop", { i });
    if (log !== null) appendFileSync(log, `${job.id} ${nowMicros()}\n`);
  };
  if (value("--rate")) {
    const rate = Number(value("--rate"));
    const jobs = rate * Number(value("--seconds"));
    const start = performance.now();
    const pending = [];
    for (let i = 0; i < jobs; i++) {
      const wait = start + (i * 1000) / rate - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      pending.push(addOne(i));
    }
    await Promise.all(pending);
    console.log(JSON.stringify({ enqueued: jobs, rate }));
  } else {
    // The burn-down's prefill: jobs added 500 a statement (addJobs); the
    // burn-down measures the workers, the latency run measures addJob.
    const jobs = Number(value("--jobs"));
    const start = performance.now();
    for (let i = 0; i < jobs; i += 500) {
      const count = Math.min(500, jobs - i);
      await utils.addJobs(Array.from({ length: count }, (_, k) => ({ identifier: "noop", payload: { i: i + k } })));
    }
    const seconds = (performance.now() - start) / 1000;
    console.log(JSON.stringify({ enqueued: jobs, seconds, per_second: jobs / seconds }));
  }
  await utils.release();
}

async function work() {
  const log = openSync(value("--log"), "a");
  const batched = args.includes("--batched");
  const worker = batched
    ? { localQueue: { size: CONCURRENCY * 4 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 }
    : {};
  const runner = await run({
    connectionString,
    concurrency: CONCURRENCY,
    maxPoolSize: CONCURRENCY + 2,
    noHandleSignals: false,
    pollInterval: 2000,
    logger,
    taskList: {
      noop: async (_payload, helpers) => {
        appendFileSync(log, `${helpers.job.id} ${nowMicros()}\n`);
      },
    },
    preset: { worker },
  });
  await runner.promise;
}

async function migrate() {
  const utils = await makeWorkerUtils({ connectionString, logger });
  await utils.migrate();
  await utils.release();
}

const mode = args[0];
const main = { enqueue, work, migrate }[mode];
if (!main) {
  console.error("usage: graphile.mjs migrate|enqueue|work");
  process.exit(2);
}
await main();
