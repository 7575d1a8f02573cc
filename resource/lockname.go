package resource

import "strings"

// LockName is the name of the lock a worker takes in an outside lock
// service (an etcd lock name, a ZooKeeper lock path) for the resource key
// key under prefix: the two joined by exactly one slash, so that prefix
// "/locks" or "/locks/" with key "/orders/7" gives "/locks/orders/7", and
// with the S3 key "bucket/a.csv" gives "/locks/bucket/a.csv".
func LockName(prefix, key string) string {
	return strings.TrimRight(prefix, "/") + "/" + strings.TrimLeft(key, "/")
}
