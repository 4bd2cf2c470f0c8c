// Command etcd is etcd 3.6 built from its Go module, the version k8s v1.34 pins.
// Debian's etcd 3.4 makes client-go >= 0.36 watches fail (no RequestWatchProgress).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
