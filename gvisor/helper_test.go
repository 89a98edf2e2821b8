package gvisor

import (
	"context"
	"fmt"
	"os"
	"time"
)

// helperEnv makes the test binary act as a separate airlock process that
// starts a sandbox, runs a long step (and, given an image directory in
// AIRLOCK_TEST_CONTAINER_ROOTFS, a sub-container) and waits to be killed:
// the SIGKILL test needs a real process to kill.
const helperEnv = "AIRLOCK_TEST_HELPER"

func runHelper() int {
	cfg := Config{
		ID:        os.Getenv("AIRLOCK_TEST_JOB_ID"),
		Workspace: os.Getenv("AIRLOCK_TEST_WORKSPACE"),
		StateRoot: os.Getenv("AIRLOCK_TEST_STATE_ROOT"),
		Limits:    DefaultLimits(),
	}
	sb, err := Create(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	go sb.Exec(context.Background(), Step{Args: []string{"/bin/sh", "-c", "echo job > /workspace/written; sleep 600 & sleep 600"}})
	if img := os.Getenv("AIRLOCK_TEST_CONTAINER_ROOTFS"); img != "" {
		// A service that runs until killed: the init of the in-sandbox
		// helper, which the test copied into the image.
		if _, err := sb.StartContainer(context.Background(), ContainerConfig{Name: "svc", RootFS: img, Args: []string{initPath}}); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
	}
	// Tell the test we are running, then wait for SIGKILL.
	fmt.Println("ready")
	time.Sleep(10 * time.Minute)
	return 0
}
