// Command loadclient is the load of bench/dataplane.sh that wrk does not
// cover: large bodies and many distinct resources.
//
//	loadclient -mode big -url URL -size 16777216 -conc 1 -runs 5
//	    PUTs -runs bodies of -size bytes, -conc at a time, streamed from
//	    memory (never built whole), and prints the throughput in MiB/s.
//	loadclient -mode distinct -url URL -n 1000000 -conc 32
//	    PUTs one small body to each of -n distinct paths URL/0, URL/1, ...
//	    with the token of -token, and prints the rate.
//
// -pid, if set, is sampled for VmRSS (from /proc/PID/status) while the load
// runs; the peak seen is printed with VmHWM and, at the end, VmRSS split
// into RssAnon (heap, stacks) and RssFile (mapped files: bbolt's mmap).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	mode := flag.String("mode", "big", "big or distinct")
	url := flag.String("url", "", "target URL (distinct: a prefix; /N is appended)")
	size := flag.Int64("size", 16<<20, "body size (big)")
	conc := flag.Int("conc", 1, "concurrent requests")
	runs := flag.Int("runs", 5, "bodies to send (big)")
	n := flag.Int("n", 1000000, "distinct resources (distinct)")
	token := flag.String("token", "1", "Fencing-Token header; empty: none")
	pid := flag.Int("pid", 0, "process whose RSS to sample")
	flag.Parse()
	if *url == "" {
		fail(errors.New("-url is required"))
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: *conc, MaxIdleConns: *conc,
		WriteBufferSize: 64 << 10, ReadBufferSize: 64 << 10,
	}}
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	if *pid > 0 {
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				if kb := status(*pid, "VmRSS"); kb > peak.Load() {
					peak.Store(kb)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
	}

	var next atomic.Int64
	var bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *conc)
	start := time.Now()
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				var req *http.Request
				var err error
				switch *mode {
				case "big":
					if i >= int64(*runs) {
						return
					}
					req, err = http.NewRequest(http.MethodPut, *url, io.LimitReader(zeros{}, *size))
					req.ContentLength = *size
				case "distinct":
					if i >= int64(*n) {
						return
					}
					req, err = http.NewRequest(http.MethodPut, *url+"/"+strconv.FormatInt(i, 10), strings.NewReader("{}"))
				default:
					err = fmt.Errorf("unknown -mode %q", *mode)
				}
				if err != nil {
					errs <- err
					return
				}
				if *token != "" {
					req.Header.Set("Fencing-Token", *token)
				}
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("PUT %s: %s", req.URL, resp.Status)
					return
				}
				bytes.Add(req.ContentLength)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	sampler.Wait()
	select {
	case err := <-errs:
		fail(err)
	default:
	}
	switch *mode {
	case "big":
		fmt.Printf("mib_per_s %.1f requests %d seconds %.2f", float64(bytes.Load())/(1<<20)/elapsed.Seconds(), *runs, elapsed.Seconds())
	default:
		fmt.Printf("req_per_s %.0f requests %d seconds %.1f", float64(*n)/elapsed.Seconds(), *n, elapsed.Seconds())
	}
	if *pid > 0 {
		fmt.Printf(" rss_peak_kib %d hwm_kib %d rss_kib %d rss_anon_kib %d rss_file_kib %d", peak.Load(),
			status(*pid, "VmHWM"), status(*pid, "VmRSS"), status(*pid, "RssAnon"), status(*pid, "RssFile"))
	}
	fmt.Println()
}

// status returns a kB field of /proc/PID/status (0 if unreadable).
func status(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// zeros is an endless body that costs no memory.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadclient:", err)
	os.Exit(1)
}
