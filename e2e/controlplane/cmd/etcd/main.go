// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3
// module pinned in versions.env. etcd's own main package lives in a module
// that is not meant to be depended on, so this wrapper calls its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
