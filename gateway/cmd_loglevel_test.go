package gateway

import (
	"log/slog"
	"testing"
)

// HOOKGATE_LOG_LEVEL: unset is info; a value that names no level is info
// too, and is handed back to be warned about (it was ignored in silence).
func TestLogLevel(t *testing.T) {
	for _, c := range []struct {
		env  string
		want slog.Level
		bad  string
	}{
		{"", slog.LevelInfo, ""},
		{"debug", slog.LevelDebug, ""},
		{"WARN", slog.LevelWarn, ""},
		{"error", slog.LevelError, ""},
		{"verbose", slog.LevelInfo, "verbose"},
	} {
		t.Setenv("HOOKGATE_LOG_LEVEL", c.env)
		if l, bad := logLevel(); l != c.want || bad != c.bad {
			t.Errorf("HOOKGATE_LOG_LEVEL=%q: %v %q, want %v %q", c.env, l, bad, c.want, c.bad)
		}
	}
}
