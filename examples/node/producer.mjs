#!/usr/bin/env node
// A GymBus producer in Node.js, with only the official `nats` client: it publishes the rows
// of a NeMo Gym JSONL file as rollout tasks to the durable queue (JetStream) and writes the
// rewarded rollouts the agent workers send back. The protocol it follows is docs/protocol.md.
//
//   NATS_URL=nats://127.0.0.1:4222 node examples/node/producer.mjs \
//     --input examples/example_single_tool_call.jsonl --output results/node.jsonl \
//     --agent example_single_tool_call_simple_agent --num-repeats 2
//
// On a locked bus (`gym-runner secure init`) give it the runner role's credentials,
// NATS_NKEY=bus-secrets/credentials/runner.nk (or a NATS_CREDS file): the producer role may
// publish tasks but not read results.

import { createHash, createHmac, randomBytes } from "node:crypto";
import { createReadStream, readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import {
  AckPolicy,
  DeliverPolicy,
  connect,
  credsAuthenticator,
  headers,
  nanos,
  nkeyAuthenticator,
  nkeys,
} from "nats";

const TASKS_STREAM = "GYM_TASKS";
const RESULTS_STREAM = "GYM_RESULTS";
const CLAIMS_STREAM = "GYM_CLAIMS";
const NAME = /^[A-Za-z0-9_-]+$/;

const { values: args } = parseArgs({
  options: {
    input: { type: "string", short: "i" },
    output: { type: "string", short: "o" },
    agent: { type: "string", short: "a" },
    "num-repeats": { type: "string", default: "1" },
    run: { type: "string" },
    timeout: { type: "string", default: "600" },
  },
});

function fail(message) {
  console.error(`error: ${message}`);
  process.exit(1);
}

if (!args.input || !args.output) {
  fail("usage: producer.mjs --input TASKS.jsonl --output ROLLOUTS.jsonl [--agent NAME] [--num-repeats N] [--run RUN] [--timeout SECONDS]");
}
const repeats = Number.parseInt(args["num-repeats"], 10);
const timeoutSeconds = Number.parseFloat(args.timeout);
// A run id is one subject token: results come back on gym.results.<run>.
const run = args.run ?? `node${randomBytes(6).toString("hex")}`;
if (!NAME.test(run)) fail(`--run ${run}: letters, digits, '_' and '-' only`);
// The run's secret: each task is signed, and a result is kept only if it carries its task's
// signature (Gym-Token), so a result nobody asked for is never written.
const key = randomBytes(32);
const tokenOf = (seq, attempt) =>
  createHmac("sha256", key).update(`${run}.${seq}.${attempt}`).digest("hex").slice(0, 32);

// Credentials as GymBus reads them; on a locked bus each identity may only read replies on
// its own inbox, _INBOX.<public key>.
function connectOptions() {
  const options = { servers: (process.env.NATS_URL ?? "nats://127.0.0.1:4222").split(","), name: "node producer" };
  let seed;
  if (process.env.NATS_CREDS) {
    const creds = readFileSync(process.env.NATS_CREDS);
    options.authenticator = credsAuthenticator(creds);
    seed = /-----BEGIN USER NKEY SEED-----\s+(\S+)/.exec(creds.toString())?.[1];
  } else if (process.env.NATS_NKEY) {
    seed = readFileSync(process.env.NATS_NKEY, "utf8").trim();
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(seed));
  }
  if (seed) {
    options.inboxPrefix = `_INBOX.${nkeys.fromSeed(new TextEncoder().encode(seed)).getPublicKey()}`;
  }
  return options;
}

// A locked bus refuses what a role may not do; say which role this needs.
function refused(what) {
  return (err) => {
    const denied = /permissions violation/i.test(String(err?.message));
    const hint = " (this producer reads results too, so it needs the runner role's credentials: the producer role may only publish tasks)";
    fail(`${what}: ${err?.message}${denied ? hint : ""}`);
  };
}

const nc = await connect(connectOptions()).catch(refused("cannot connect to NATS"));
const js = nc.jetstream();
const jsm = await nc.jetstreamManager().catch(refused("cannot use JetStream"));
for (const stream of [TASKS_STREAM, RESULTS_STREAM]) {
  // Agent workers create the streams when they start.
  await jsm.streams.info(stream).catch(refused(`no stream ${stream} (start the GymBus agent workers first)`));
}

// Read results first, so none is missed: a durable consumer on this run's results subject.
const consumerName = `gym-run-${run}`;
await jsm.consumers
  .add(RESULTS_STREAM, {
    durable_name: consumerName,
    filter_subject: `gym.results.${run}`,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    inactive_threshold: nanos(3600 * 1000),
  })
  .catch(refused("cannot read results"));
const consumer = await js.consumers.get(RESULTS_STREAM, consumerName).catch(refused("cannot read results"));

const expected = new Set();
const written = new Map(); // seq -> reward, or null for a failure row
const rows = [];
let published = 0;
let publishing = true;
let forged = 0;
let doneWith = null;
const finished = new Promise((resolve) => {
  doneWith = resolve;
});

// A rollout too big for one message waits in the claim store, in chunks addressed to the
// runner role: Gym-Claim is "<subject prefix>;<chunks>;<sha256, base64url>", and chunk i is
// the last message on <prefix>.<i>, read by a direct get (all the runner role may do there).
async function bodyOf(msg) {
  const claim = msg.headers?.get("Gym-Claim");
  if (!claim) return msg.data;
  const [prefix, chunks, digest] = claim.split(";");
  const parts = [];
  for (let i = 0; i < Number(chunks); i += 1) {
    parts.push((await jsm.direct.getMessage(CLAIMS_STREAM, { last_by_subj: `${prefix}.${i}` })).data);
  }
  const body = Buffer.concat(parts);
  if (createHash("sha256").update(body).digest("base64url") !== digest) {
    throw new Error(`claimed body ${prefix} is gone or changed`);
  }
  return body;
}

// Once its result is acked, a claimed body is released: an empty message that lives one
// second replaces each chunk.
function release(msg) {
  const claim = msg.headers?.get("Gym-Claim");
  if (!claim) return;
  const [prefix, chunks] = claim.split(";");
  const h = headers();
  h.set("Nats-TTL", "1");
  for (let i = 0; i < Number(chunks); i += 1) nc.publish(`${prefix}.${i}`, new Uint8Array(0), { headers: h });
}

async function readResults() {
  const messages = await consumer.consume({ max_messages: 256 });
  for await (const msg of messages) {
    const seq = msg.headers?.get("Gym-Seq") ?? "";
    const attempt = msg.headers?.get("Gym-Attempt") ?? "0";
    if (!expected.has(seq) || written.has(seq)) {
      msg.ack(); // not ours, or a task that ran twice (a worker died mid-rollout): keep the first
      continue;
    }
    if (msg.headers?.get("Gym-Token") !== tokenOf(seq, attempt)) {
      forged += 1;
      msg.ack();
      continue;
    }
    // Written as the worker sent it: a JSON round trip here would turn a reward of 1.0 into 1.
    const text = new TextDecoder().decode(await bodyOf(msg));
    const row = JSON.parse(text);
    rows.push(text);
    written.set(seq, row._ng_failure_class ? null : row.reward);
    msg.ack();
    release(msg);
    if (!publishing && written.size === published) doneWith();
  }
}
const reading = readResults();

// Publish one task per rollout: its message id makes a repeated publish harmless.
const deadline = Date.now() / 1000 + timeoutSeconds;
let task = 0;
let lineNumber = 0;
const lines = createInterface({ input: createReadStream(args.input), crlfDelay: Infinity });
for await (const line of lines) {
  lineNumber += 1;
  if (!line.trim()) continue;
  let row;
  try {
    row = JSON.parse(line);
  } catch (err) {
    console.error(`${args.input}:${lineNumber}: not JSON (${err.message}); skipped`);
    continue;
  }
  const agent = row.agent_ref?.name ?? args.agent;
  if (!agent || !NAME.test(agent)) {
    console.error(`${args.input}:${lineNumber}: field agent_ref: no valid agent name and no --agent; skipped`);
    continue;
  }
  row.agent_ref ??= { type: "responses_api_agents", name: agent };
  row._ng_task_index = task;
  for (let rollout = 0; rollout < repeats; rollout += 1) {
    row._ng_rollout_index = rollout;
    const seq = String(published);
    const h = headers();
    h.set("Gym-Run", run);
    h.set("Gym-Seq", seq);
    h.set("Gym-Attempt", "0");
    h.set("Gym-Deadline", deadline.toFixed(3));
    h.set("Gym-Token", tokenOf(seq, "0"));
    expected.add(seq);
    await js
      .publish(`gym.tasks.${agent}`, new TextEncoder().encode(JSON.stringify(row)), { msgID: `${run}.${seq}.0`, headers: h })
      .catch((err) => fail(`${args.input}:${lineNumber}: task not stored: ${err.message}`));
    published += 1;
  }
  task += 1;
}
publishing = false;
console.error(`published ${published} tasks of run ${run}; waiting for their rollouts`);

const timer = setTimeout(() => doneWith(), timeoutSeconds * 1000);
if (written.size < published) await finished;
clearTimeout(timer);
writeFileSync(args.output, rows.map((row) => `${row}\n`).join(""));
await jsm.consumers.delete(RESULTS_STREAM, consumerName).catch(() => {});
await nc.drain();
await reading.catch(() => {});

const rewards = [...written.values()].filter((reward) => reward !== null);
const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0;
console.error(
  `wrote ${written.size} of ${published} rollouts to ${args.output}: ${rewards.length} rewarded ` +
    `(mean reward ${mean.toFixed(3)}), ${written.size - rewards.length} failed` +
    (forged ? `; dropped ${forged} results with a wrong Gym-Token` : ""),
);
if (written.size < published) {
  const missing = [...expected].filter((seq) => !written.has(seq));
  fail(`no rollout within ${timeoutSeconds} s for tasks ${missing.slice(0, 20).join(", ")}`);
}
