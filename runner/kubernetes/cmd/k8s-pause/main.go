// Command k8s-pause is the pod sandbox's pause process of the project's
// test cluster (scripts/k8s-setup.sh packs it, static, as the CRI
// plugin's sandbox_image): it holds the pod's namespaces, waits for
// SIGTERM or SIGINT and exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
