package gateway

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestServeFallsBackToTheEmbeddedConfigOnlyWhenThereIsNone: serve without
// -config runs on the embedded default (the demo config, with an unsigned
// source and the trial token) only when no config.yaml is there at all.
// A config.yaml that is a dangling symlink (to a secret or a ConfigMap not
// mounted) is an error: it ran the demo config.
func TestServeFallsBackToTheEmbeddedConfigOnlyWhenThereIsNone(t *testing.T) {
	embedded, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()

	none := filepath.Join(dir, "config.yaml")
	cfg, err := loadServeConfig(none, false, embedded, log)
	if err != nil || len(cfg.Sources) == 0 {
		t.Fatalf("no config.yaml: %v; want the embedded config", err)
	}
	if _, err := loadServeConfig(none, true, embedded, log); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("-config naming a missing file: %v; want an error", err)
	}

	sub := filepath.Join(dir, "mounted")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(sub, "config.yaml")
	if err := os.Symlink(filepath.Join(dir, "secrets", "config.yaml"), dangling); err != nil {
		t.Fatal(err)
	}
	if cfg, err := loadServeConfig(dangling, false, embedded, log); err == nil {
		t.Fatalf("config.yaml a dangling symlink: ran on the embedded config (%d sources); want an error", len(cfg.Sources))
	}
}
