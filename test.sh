#!/usr/bin/env bash
# The project's test command (README): formatting, vet, the race-enabled
# test suite, and a short run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")"
# -buildvcs=false: the crash tests build the binary, and a checkout owned
# by another user makes go build fail to read its VCS status.
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 -timeout 15m ./...

echo "== fuzz (short budget per target)"
fuzztime="${FUZZTIME:-5s}"
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "-- $pkg $target"
    for try in 1 2 3; do
      if out=$(go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" 2>&1); then
        break
      fi
      # Go 1.26's fuzz coordinator can fail a target with a bare "context
      # deadline exceeded" when -fuzztime ends mid-execution (golang/go#75804,
      # fixed in Go 1.27). That is not a finding: a real one writes its
      # input to testdata/fuzz. Run such a target again; fail on anything else.
      if [ "$try" -lt 3 ] && grep -q 'context deadline exceeded' <<<"$out" \
        && ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' <<<"$out"; then
        echo "   (the fuzz engine's deadline race, golang/go#75804: running it again)"
        continue
      fi
      echo "$out" | tail -40
      exit 1
    done
  done
done
echo "fuzz: all targets ran ${fuzztime} without a failure"
