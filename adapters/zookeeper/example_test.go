package zookeeper_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/resource"
)

// A worker that holds a ZooKeeper lock and writes through a gateway route
// with token_source: {zookeeper: {servers: [...], path: /fencegate/locks}}.
// The token is the czxid of the holder's lock node, the child of the lock
// path with the lowest sequence number (with Curator:
// InterProcessMutex.getParticipantNodes() first entry, then
// checkExists().forPath(node).getCzxid()).
func Example_worker() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	path := resource.LockName("/fencegate/locks", "/orders/7")
	lock := zk.NewLock(conn, path, zk.WorldACL(zk.PermAll))
	if err := lock.Lock(); err != nil {
		panic(err)
	}
	defer lock.Unlock()
	children, _, err := conn.Children(path)
	if err != nil {
		panic(err)
	}
	children = slices.DeleteFunc(children, func(n string) bool { return !strings.Contains(n, "-lock-") })
	seq := func(n string) string { return n[len(n)-10:] }
	holder := slices.MinFunc(children, func(a, b string) int { return strings.Compare(seq(a), seq(b)) })
	_, st, err := conn.Exists(path + "/" + holder)
	if err != nil {
		panic(err)
	}

	req, _ := http.NewRequest("PUT", "http://127.0.0.1:8080/orders/7", strings.NewReader("shipped"))
	req.Header.Set("Fencing-Token", strconv.FormatInt(st.Czxid, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}
