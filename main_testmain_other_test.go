//go:build unix && !linux

package main

import "os/exec"

// setDeathSignal does nothing where the kernel has no parent-death signal
// (macOS, the BSDs): a server outlives a test binary that dies without its
// clean-up, and keeps its folder (shortener-test-*) in the temporary
// directory.
func setDeathSignal(*exec.Cmd) {}

// deathSignal says that setDeathSignal does nothing here.
const deathSignal = false
