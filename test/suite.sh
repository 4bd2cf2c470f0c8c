#!/usr/bin/env bash
# make test's tests, in parallel streams that each wait mostly on their
# sites rather than on the CPU: the end-to-end package in E2E_SHARDS
# shards (each its own process and sitebox site; sites side by side never
# share an address or a port), and beside them fuzzing, the race step and
# every other package, one after another. Each stream writes go test's
# JSON to OUT; test/testtimes then reports them as one suite: every
# failure's whole output, each package's time and the slowest tests.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OUT=$(realpath -m "${TEST_OUT:-.test-out}")
SHARDS=${E2E_SHARDS:-3}
FUZZTIME=${FUZZTIME:-10s}
RACE_PKGS=${RACE_PKGS:?}
FUZZ_TARGETS=${FUZZ_TARGETS:?}
E2E=./test/e2e/
DURATIONS=test/e2e/durations.txt

rm -rf "$OUT" && mkdir -p "$OUT" || exit 1
start=$(date +%s)
say() { echo "test: +$(( $(date +%s) - start ))s $*"; }

# The e2e test binary and the sitecon it runs, built once for every
# shard; its tests' names.
if ! { $GO test -c -o "$OUT/e2e.test" $E2E && $GO build -o "$OUT/sitecon" .; } > "$OUT/e2e-build.log" 2>&1; then
  cat "$OUT/e2e-build.log"; echo "test: the e2e package did not build"; exit 1
fi
(cd $E2E && "$OUT/e2e.test" -test.list '.*') > "$OUT/e2e.tests" || { echo "test: listing the e2e tests failed"; exit 1; }

pids=()
for ((i = 0; i < SHARDS; i++)); do
  pattern=$($GO run ./test/testtimes -shard "$i/$SHARDS" -durations "$DURATIONS" < "$OUT/e2e.tests") || exit 1
  say "e2e shard $((i + 1)) of $SHARDS: $(tr '|' '\n' <<<"$pattern" | wc -l) tests"
  # As go test runs a test binary: in its package's directory, its
  # verbose output turned into JSON by test2json.
  (cd $E2E && SITECON_E2E_BIN="$OUT/sitecon" "$OUT/e2e.test" -test.run "$pattern" -test.timeout 45m -test.v=test2json 2>&1 |
    $GO tool test2json -t -p github.com/sitecon/sitecon/test/e2e > "$OUT/e2e-$i.json"
   echo "${PIPESTATUS[0]}" > "$OUT/e2e-$i.rc"
   say "e2e shard $((i + 1)) done") &
  pids+=($!)
done

# Beside the shards, two more streams: fuzzing then the race step; and
# every other package, one after another (kube, kube/flow and views start
# sites of their own, side by side with the shards').
(
  for t in $FUZZ_TARGETS; do
    $GO test -json -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" ./agent/ > "$OUT/fuzz-$t.json" 2>&1
    echo $? > "$OUT/fuzz-$t.rc"
  done
  say "fuzzing done"
  CGO_ENABLED=1 $GO test -json -race -count=1 -timeout 15m $RACE_PKGS > "$OUT/race.json" 2>&1
  echo $? > "$OUT/race.rc"
  say "race step done"
) &
pids+=($!)
(
  # shellcheck disable=SC2046
  $GO test -json -count=1 -p 1 -timeout 30m $($GO list ./... | grep -v '/test/e2e$') > "$OUT/packages.json" 2>&1
  echo $? > "$OUT/packages.rc"
  say "the other packages done"
) &
pids+=($!)

wait "${pids[@]}"
say "all streams done"
rc=0
for f in "$OUT"/*.rc; do
  if [ "$(cat "$f")" != 0 ]; then
    echo "test: $(basename "$f" .rc) exited $(cat "$f")"; rc=1
  fi
done
$GO run ./test/testtimes -record "$OUT/durations.txt" "$OUT"/*.json || rc=1
echo "test: the e2e tests' times are in $OUT/durations.txt; copy them to $DURATIONS when the shards drift apart"
exit $rc
