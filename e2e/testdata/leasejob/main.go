// Command leasejob is the job e2e/lease_run_test.go runs under `fencegate
// lease run`. It reads the lease from its environment, as any job would,
// and prints one line per event on stdout for the test to read.
//
//	leasejob env              print the lease variables and exit 0
//	leasejob exit N           exit with status N
//	leasejob signals          print each signal received; exit 143 on SIGTERM
//	leasejob write            PUT "job@TOKEN#i" to $FENCEGATE_URL$FENCING_RESOURCE
//	                          every 20ms; on SIGTERM one last write, then exit
//	leasejob release-and-hang release its own lease over the coordinator API,
//	                          then ignore SIGTERM and sleep
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	token := os.Getenv("FENCING_TOKEN")
	res := os.Getenv("FENCING_RESOURCE")
	switch os.Args[1] {
	case "env":
		for _, k := range []string{"FENCING_TOKEN", "FENCING_RESOURCE", "FENCING_OWNER", "FENCEGATE_URL"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
	case "exit":
		n, _ := strconv.Atoi(os.Args[2])
		os.Exit(n)
	case "signals":
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
		fmt.Printf("ready pid=%d\n", os.Getpid())
		for s := range sigs {
			fmt.Printf("got %d\n", s)
			if s == syscall.SIGTERM {
				os.Exit(143)
			}
		}
	case "write":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		fmt.Printf("ready pid=%d\n", os.Getpid())
		for i := 0; ; i++ {
			select {
			case <-sigs:
				fmt.Printf("SIGTERM; last write -> %d\n", put(res, token, fmt.Sprintf("job@%s#last", token)))
				os.Exit(143)
			case <-time.After(20 * time.Millisecond):
				fmt.Printf("write %d -> %d\n", i, put(res, token, fmt.Sprintf("job@%s#%d", token, i)))
			}
		}
	case "release-and-hang":
		signal.Ignore(syscall.SIGTERM)
		t, _ := strconv.ParseInt(token, 10, 64)
		b, _ := json.Marshal(map[string]any{"resource": res, "owner": os.Getenv("FENCING_OWNER"), "token": t})
		resp, err := http.Post(os.Getenv("FENCEGATE_COORDINATOR")+"/v1/leases/release", "application/json", bytes.NewReader(b))
		if err != nil {
			fmt.Println("release:", err)
			os.Exit(1)
		}
		out, _ := io.ReadAll(resp.Body)
		fmt.Printf("released: %s", out)
		time.Sleep(time.Hour)
	}
}

func put(res, token, value string) int {
	req, _ := http.NewRequest(http.MethodPut, os.Getenv("FENCEGATE_URL")+res, bytes.NewBufferString(value))
	req.Header.Set("Fencing-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
