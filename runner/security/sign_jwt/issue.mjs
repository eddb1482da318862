#!/usr/bin/env node
// Signs the JWTs of `gym-runner secure init --operator` with NATS's own JWT library
// (@nats-io/jwt, pinned by package-lock.json; `npm ci --prefix <this folder>` installs it).
// It makes no keys and writes no file: the caller made the nkeys and writes what it gets.
//
// stdin:  {"operator": {"name", "seed", "system_account"},
//          "accounts": [{"name", "seed", "limits"}],
//          "users": [{"name", "seed", "account", "permissions": {"pub", "sub", "resp"}}]}
// stdout: {"operator": "<jwt>", "accounts": {"<name>": "<jwt>"}, "users": {"<name>": "<creds file>"}}

import { encodeAccount, encodeOperator, encodeUser, fmtCreds, fromSeed } from "@nats-io/jwt";

const text = [];
for await (const chunk of process.stdin) text.push(chunk);
const plan = JSON.parse(Buffer.concat(text).toString("utf8"));
const key = (seed) => fromSeed(new TextEncoder().encode(seed));

const operator = key(plan.operator.seed);
const out = { accounts: {}, users: {} };
out.operator = await encodeOperator(plan.operator.name, operator, {
  system_account: plan.operator.system_account,
});
const accounts = {};
for (const account of plan.accounts) {
  accounts[account.name] = key(account.seed);
  out.accounts[account.name] = await encodeAccount(
    account.name,
    accounts[account.name],
    { limits: account.limits },
    { signer: operator },
  );
}
for (const user of plan.users) {
  const pair = key(user.seed);
  const jwt = await encodeUser(user.name, pair, accounts[user.account], user.permissions);
  out.users[user.name] = new TextDecoder().decode(fmtCreds(jwt, pair));
}
process.stdout.write(JSON.stringify(out));
