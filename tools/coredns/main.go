// CoreDNS with only the plugins the real test node uses: the cluster's names from the
// Kubernetes API, nothing forwarded outside (tests send no traffic off the machine).
// The upstream binary registers every plugin through core/plugin; this one imports a few.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() {
	coremain.Run()
}
