package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// gatewayBinary returns the hookgate binary to run: the one given, or one
// built from this repository into a temp dir.
func gatewayBinary(given string) (string, func(), error) {
	if given != "" {
		return given, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "hookbench-bin")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "hookgate")
	progress("building hookgate ...")
	cmd := exec.Command("go", "build", "-o", bin, "hookgate")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build hookgate: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// freeAddr returns a free loopback address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// process is a running child server.
type process struct {
	cmd *exec.Cmd
	log *os.File
}

// startProcess runs bin with args and waits until healthURL answers 200.
func startProcess(ctx context.Context, bin string, args []string, healthURL, logPath string) (*process, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), "HOOKGATE_LOG_LEVEL=warn")
	if procs := os.Getenv("HOOKBENCH_GATEWAY_PROCS"); procs != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+procs) // pin the gateway's cores for experiments
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &process{cmd: cmd, log: lf}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(healthURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return nil, fmt.Errorf("%s did not become healthy (log: %s)", bin, logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		p.log.Close()
		return err
	case <-time.After(60 * time.Second):
		p.kill()
		return errors.New("did not stop within 60s")
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	_, _ = p.cmd.Process.Wait()
	p.log.Close()
}

// rssKiB reads the process's resident set (VmRSS) and peak (VmHWM) in KiB.
func (p *process) rssKiB() (rss, peak int64) {
	m := p.status()
	return m["VmRSS:"], m["VmHWM:"]
}

// cpu returns the CPU time (user + system) the process has used so far,
// from /proc/<pid>/stat (in clock ticks of 1/100 s, Linux's USER_HZ).
func (p *process) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may
	// contain spaces: state is the first, utime and stime the 12th and 13th.
	i := bytes.LastIndexByte(b, ')')
	fs := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fs) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fs[11], 10, 64)
	stime, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// cpuPerRequest is the CPU the process used between two cpu() readings,
// per acknowledged request, in microseconds.
func cpuPerRequest(before, after time.Duration, acked int64) float64 {
	if acked <= 0 || after <= before {
		return 0
	}
	return float64((after - before).Microseconds()) / float64(acked)
}

// anonKiB is the anonymous part of the resident set (heap, stacks, Badger's
// arenas), without the file pages of memory-mapped tables and logs that
// the kernel can drop at will.
func (p *process) anonKiB() int64 { return p.status()["RssAnon:"] }

// status reads the KiB figures of /proc/<pid>/status.
func (p *process) status() map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && strings.HasSuffix(fs[0], ":") {
			if n, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
				out[fs[0]] = n
			}
		}
	}
	return out
}
