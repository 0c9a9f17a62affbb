package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has Linux kill the server if the test binary dies without
// reaching its clean-up (a panic, go test's -timeout, a SIGKILL), so that no
// throwaway server outlives the tests.
func setDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// deathSignal says that setDeathSignal works here: a server dies with the
// test binary.
const deathSignal = true
