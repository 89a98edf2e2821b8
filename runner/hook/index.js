// The runner's container-hook entry point: ACTIONS_RUNNER_CONTAINER_HOOKS
// names this file, and the runner runs it with its own Node for every
// hook call. All logic is in Go: this only runs `airlock hook` with the
// call's JSON on standard input and returns its exit status.
// AIRLOCK_BIN names the airlock binary (default: airlock on PATH).
"use strict";
const { spawnSync } = require("child_process");
const bin = process.env.AIRLOCK_BIN || "airlock";
const r = spawnSync(bin, ["hook"], { stdio: "inherit" });
if (r.error) {
  console.error(`airlock hook: cannot run ${bin}: ${r.error.message}`);
  process.exit(1);
}
process.exit(r.status === null ? 1 : r.status);
