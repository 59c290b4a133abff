package gateway

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hookgate/gateway/config"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
)

// Build describes the binary: its version and the config it embeds.
type Build struct {
	Version string
	// DefaultConfig is the repository's config.yaml, used by serve when no
	// -config is given and ./config.yaml does not exist.
	DefaultConfig []byte
}

// Main runs the hookgate command line and returns the exit code.
func Main(args []string, b Build, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args, b, stderr)
	case "check-config":
		fl := flag.NewFlagSet("check-config", flag.ContinueOnError)
		fl.SetOutput(stderr)
		path := fl.String("config", "config.yaml", "config file to check")
		if err := fl.Parse(args); err != nil {
			return parseExit(err)
		}
		// "check-config FILE" means that file: checking ./config.yaml
		// instead, and saying OK, would pass a file nobody read.
		if fl.NArg() == 1 && !isFlagSet(fl, "config") {
			*path = fl.Arg(0)
		} else if fl.NArg() > 0 {
			return unexpectedArgs(stderr, cmd, fl.Args())
		}
		return config.Check(*path, stdout, stderr)
	case "help":
		fmt.Fprintln(stdout, usage)
		return 0
	case "version":
		fl := flag.NewFlagSet("version", flag.ContinueOnError)
		fl.SetOutput(stderr)
		if err := fl.Parse(args); err != nil {
			return parseExit(err) // -h: exit 0
		}
		if fl.NArg() > 0 {
			fmt.Fprintf(stderr, "hookgate version: unexpected argument %q (it takes none)\n", fl.Arg(0))
			return 2
		}
		fmt.Fprintf(stdout, "hookgate %s\n", b.Version)
		return 0
	default:
		fmt.Fprintf(stderr, "hookgate: unknown command %q (want serve, check-config, version or help)\n", cmd)
		return 2
	}
}

// usage is what "hookgate help" prints.
const usage = `usage:
  hookgate [serve] [-config FILE]     run the gateway (default -config config.yaml)
  hookgate check-config [-config] FILE
                                      validate a config file: exit 0, or 1 with every error
  hookgate version                    print the version`

// parseExit is the exit code of a command whose flags did not parse: 0
// for -h or -help (the flag package has printed the flags), else 2.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// unexpectedArgs refuses arguments a command does not take (exit 2).
func unexpectedArgs(stderr io.Writer, cmd string, args []string) int {
	fmt.Fprintf(stderr, "hookgate %s: unexpected argument %q (a config file is given with -config FILE)\n", cmd, args[0])
	return 2
}

func serve(args []string, b Build, stderr io.Writer) int {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(stderr)
	path := fl.String("config", "config.yaml", "config file")
	if err := fl.Parse(args); err != nil {
		return parseExit(err)
	}
	if fl.NArg() > 0 {
		return unexpectedArgs(stderr, "serve", fl.Args())
	}
	level, bad := logLevel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if bad != "" {
		log.Warn("HOOKGATE_LOG_LEVEL is not debug, info, warn or error: logging at info", "value", bad)
	}
	cfg, err := loadServeConfig(*path, isFlagSet(fl, "config"), b.DefaultConfig, log)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if path := os.Getenv("HOOKGATE_CPUPROFILE"); path != "" {
		stopProfile, err := startCPUProfile(path)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer stopProfile()
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit: the GC works harder near it instead of letting the
		// heap double (Badger's compaction buffers come and go in bursts).
		cg, _ := os.ReadFile("/proc/self/cgroup")
		debug.SetMemoryLimit(memoryLimit(string(cg), "/sys/fs/cgroup"))
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(sigCtx)
	defer cancel()
	// A hangup (the terminal or SSH session went away) stops gracefully
	// too, unless the launcher ignores it (nohup): asking for SIGHUP would
	// undo that. It comes twice (the kernel, then the exiting shell), so it
	// stays caught, and dropped, until the end.
	hup := make(chan os.Signal, 1)
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	// After the first signal, a second SIGINT or SIGTERM ends the process
	// at once (the default action), as an operator pressing Ctrl-C twice
	// expects: what was acknowledged is durable, so this is no worse than
	// a crash.
	returned := make(chan struct{})
	defer close(returned) // before stop(): defers run last first
	go func() {
		select {
		case <-sigCtx.Done():
		case <-hup:
			cancel()
		case <-returned:
			return
		}
		stop()
		log.Info("signal received: stopping gracefully; a second signal stops at once (SIGINT or SIGTERM; a repeated SIGHUP is ignored)")
	}()
	if err := Run(ctx, cfg, Options{Logger: log, Version: b.Version, HeapProfile: os.Getenv("HOOKGATE_MEMPROFILE")}); err != nil {
		log.Error("hookgate failed", "err", err)
		return 1
	}
	return 0
}

// loadServeConfig reads the config file; when none was named and
// ./config.yaml does not exist, the embedded default config is used.
func loadServeConfig(path string, explicit bool, embedded []byte, log *slog.Logger) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err == nil || explicit || embedded == nil || !errors.Is(err, fs.ErrNotExist) {
		return cfg, err
	}
	// A config.yaml that is there but cannot be followed (a symlink to a
	// secret or a ConfigMap not mounted) is an error, not a reason to run
	// the demo config, with its unsigned source and trial token.
	if _, lerr := os.Lstat(path); lerr == nil || !errors.Is(lerr, fs.ErrNotExist) {
		return nil, err
	}
	log.Info("no config.yaml here: running on the embedded default config")
	return config.Parse(embedded, "embedded config.yaml", os.LookupEnv)
}

// startCPUProfile writes a CPU profile of the whole run to path (set
// HOOKGATE_CPUPROFILE; used to see where ingest time goes, docs/benchmarks.md).
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func isFlagSet(fl *flag.FlagSet, name string) bool {
	set := false
	fl.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// logLevel is HOOKGATE_LOG_LEVEL's level (info when unset), and the
// value when it names none.
func logLevel() (slog.Level, string) {
	v := os.Getenv("HOOKGATE_LOG_LEVEL")
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return slog.LevelInfo, v
	}
	return l, ""
}
