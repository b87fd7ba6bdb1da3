// Command etcd is etcd's own server entry point, built from the module proxy: etcd's root
// module replaces its sibling modules with relative paths, so it cannot be built directly.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
