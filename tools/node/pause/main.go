// Command pause is what the node tier's pod sandboxes run: it holds the pod's namespaces and
// does nothing else, reaping the children re-parented to it and ending on SIGINT or SIGTERM, as
// Kubernetes' own pause does. Built here because no image registry is reachable.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
