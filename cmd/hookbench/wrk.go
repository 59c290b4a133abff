package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"time"
)

// writeWrkRequests writes n signed ingest requests for wrk (wrk.lua), one
// file per wrk thread (prefix1.txt … prefixN.txt), one request per line:
// webhook-id, webhook-timestamp, webhook-signature and the body, separated
// by tabs. Signing them here keeps the client's cost per request (a Lua
// table lookup) far below hookbench's own, so the gateway gets the CPU a
// remote client would leave it. The timestamps are now: use the files
// within the standard-webhooks tolerance (5 minutes).
func writeWrkRequests(n, files, size int, prefix string) error {
	if files < 1 || n < files {
		return fmt.Errorf("-wrk-requests %d over -wrk-threads %d: need at least one request per thread", n, files)
	}
	ws := make([]*bufio.Writer, files)
	for i := range ws {
		f, err := os.Create(prefix + strconv.Itoa(i+1) + ".txt")
		if err != nil {
			return err
		}
		defer f.Close()
		ws[i] = bufio.NewWriterSize(f, 1<<20)
	}
	run := time.Now().UnixNano()
	for i := range n {
		now := time.Now()
		id := fmt.Sprintf("msg_%x_%d", run, i)
		ts := strconv.FormatInt(now.Unix(), 10)
		body := eventBody(id, now.UnixNano(), size)
		if _, err := fmt.Fprintf(ws[i%files], "%s\t%s\t%s\t%s\n", id, ts, signature(id, ts, body), body); err != nil {
			return err
		}
	}
	for _, w := range ws {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}
