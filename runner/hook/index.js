// The runner's container-hook entry point: ACTIONS_RUNNER_CONTAINER_HOOKS
// names this file, and the runner runs it with its own Node for every
// hook call. All logic is in Go: this only runs `airlock hook` with the
// call's JSON on standard input and returns its exit status.
//
// AIRLOCK_BIN names the airlock binary, as an absolute path (default
// /usr/local/bin/airlock). Never a PATH lookup: the runner prepends the
// job's $GITHUB_PATH entries to this process's PATH.
"use strict";
const { spawn } = require("child_process");
const path = require("path");
const bin = process.env.AIRLOCK_BIN || "/usr/local/bin/airlock";
if (!path.isAbsolute(bin)) {
  console.error(`airlock hook: AIRLOCK_BIN must be an absolute path, not ${bin}`);
  process.exit(1);
}
// gVisor's runsc needs root, and airlock does not take it through sudo:
// `sudo airlock hook` would let the runner's user mount any host path into
// a sandbox through a payload of its own. The runner runs as root.
if (typeof process.getuid === "function" && process.getuid() !== 0) {
  console.error(
    `airlock hook: the runner runs as uid ${process.getuid()}, and airlock needs root (gVisor's runsc creates the job's sandbox): ` +
      "run the runner service as root (sudo ./svc.sh install root), see airlock's docs/runner.md"
  );
  process.exit(1);
}
const child = spawn(bin, ["hook"], { stdio: "inherit" });
// The runner signals this process when it cancels a step: pass it on.
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => child.kill(sig));
}
child.on("error", (err) => {
  console.error(`airlock hook: cannot run ${bin}: ${err.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => process.exit(code === null ? 1 : code));
