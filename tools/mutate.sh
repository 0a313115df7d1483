#!/usr/bin/env bash
# Mutation check: removes one validation at a time, rebuilds the tests that
# should notice, runs them, puts the source back. Every mutant must be killed
# (some test fails, crashes or times out); a survivor names a rule no test
# holds. A tool to run by hand, not part of `make test` (docs/testing.md).
#
#   tools/mutate.sh [LIST...]      default: tools/mutants/vhost_user.txt
#   MUTATE_ONLY=REGEX              only the mutants whose description matches
#   MUTATE_BUILD=DIR               build tree (default build/mutate, Release)
#
# A list (tools/mutants/*.txt) names the targets to build and the test
# programs to run (paths in the build tree, each bounded by MUTATE_TEST_TIMEOUT
# seconds, default 300), then its mutants:
#   targets: t1 t2 ...
#   tests: tests/dir/prog1 tests/dir/prog2 ...
#   @ path/in/repo.cc | what the mutant breaks
#   - original line            (one or more; matched with their indentation
#   - original line             stripped, and the sequence must occur once)
#   + replacement line         (none: the lines are deleted)
# A mutant must build with the tree's -Werror: one that removes a function's
# only call keeps the call (`cond && false`).
# Exit: 0 all killed, 1 a survivor, 2 a list or build problem.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MUTATE_BUILD:-$root/build/mutate}
only=${MUTATE_ONLY:-}
step_timeout=${MUTATE_TIMEOUT:-900}
test_timeout=${MUTATE_TEST_TIMEOUT:-300}
[ $# -gt 0 ] || set -- "$root/tools/mutants/vhost_user.txt"
logs=$build/mutate-logs
mkdir -p "$logs"
backup=$build/mutate.orig
current=""
restore() {
    # cp without -p: the restored file is newer than the mutant's object, so it is rebuilt.
    if [ -n "$current" ]; then cp "$backup" "$root/$current"; current=""; fi
}
trap 'restore' EXIT
trap 'restore; exit 2' INT TERM

if [ ! -f "$build/build.ninja" ]; then
    (cd "$root" && CXX=${CXX:-g++} cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release) \
        > "$logs/configure.log" 2>&1 || { echo "configure failed: $logs/configure.log"; exit 2; }
fi

# run_tests LOG PROG...: each program in turn (gtest's brief output); fails at the first failure.
run_tests() {
    local log=$1 prog
    shift
    for prog in "$@"; do
        echo "-- $prog" >> "$log"
        (cd "$build" && timeout "$test_timeout" "./$prog" --gtest_brief=1) >> "$log" 2>&1 || {
            echo "-- $prog: exit $?" >> "$log"
            return 1
        }
    done
}

# apply FILE INDEX LIST: writes mutant INDEX of LIST into FILE (python: exact line matching).
apply() {
    python3 - "$@" <<'PY'
import sys
path, index, listfile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
muts, cur = [], None
for line in open(listfile):
    line = line.rstrip("\n")
    if line.startswith("@ "):
        cur = {"orig": [], "repl": []}
        muts.append(cur)
    elif cur is not None and line.startswith("- "):
        cur["orig"].append(line[2:].strip())
    elif cur is not None and line.startswith("+ "):
        cur["repl"].append(line[2:].strip())
m = muts[index]
src = open(path).read().split("\n")
n = len(m["orig"])
hits = [i for i in range(len(src) - n + 1)
        if [l.strip() for l in src[i:i + n]] == m["orig"]]
if len(hits) != 1:
    print(f"the original lines occur {len(hits)} times (want once)")
    sys.exit(3)
i = hits[0]
indent = src[i][:len(src[i]) - len(src[i].lstrip())]
src[i:i + n] = [indent + r for r in m["repl"]]
open(path, "w").write("\n".join(src))
PY
}

total=0 killed=0 survived=0 broken=0
report=$build/mutate-report.txt
: > "$report"
for list in "$@"; do
    targets=$(sed -n 's/^targets: //p' "$list")
    tests=$(sed -n 's/^tests: //p' "$list")
    if [ -z "$targets" ] || [ -z "$tests" ]; then echo "$list: no targets:/tests: line"; exit 2; fi
    # The unmutated tree must build and pass, or nothing below means anything.
    echo "== $list: baseline ($targets)"
    if ! timeout "$step_timeout" cmake --build "$build" --target $targets > "$logs/baseline.log" 2>&1 ||
       ! run_tests "$logs/baseline.log" $tests; then
        echo "baseline fails: $logs/baseline.log"; exit 2
    fi
    index=0
    while IFS= read -r header; do
        file=${header#@ }; file=${file%% | *}; what=${header#* | }
        k=$index; index=$((index + 1))
        if [ -n "$only" ] && ! [[ $what =~ $only ]]; then continue; fi
        total=$((total + 1))
        log=$logs/$(basename "$list" .txt)-$k.log
        cp "$root/$file" "$backup"
        current=$file
        if ! why=$(apply "$root/$file" "$k" "$list"); then
            restore
            echo "STALE     $file: $what ($why)" | tee -a "$report"
            broken=$((broken + 1)); continue
        fi
        if ! timeout "$step_timeout" cmake --build "$build" --target $targets > "$log" 2>&1; then
            restore
            echo "NO-BUILD  $file: $what ($log)" | tee -a "$report"
            broken=$((broken + 1)); continue
        fi
        if run_tests "$log" $tests; then
            echo "SURVIVED  $file: $what ($log)" | tee -a "$report"
            survived=$((survived + 1))
        else
            # The failing program, and its first failing tests (none: a crash or a timeout).
            failed="$(grep -o -- '^-- [^ ]*: exit [0-9]*' "$log" | sed 's/^-- //;s|.*/||')"
            failed="$failed $(grep -o '^\[  FAILED  \] [A-Za-z0-9_/.]*' "$log" | head -2 |
                              sed 's/^\[  FAILED  \] //' | tr '\n' ' ')"
            echo "killed    $file: $what [$failed]" | tee -a "$report"
            killed=$((killed + 1))
        fi
        restore
    done < <(grep '^@ ' "$list")
done
echo "mutants: $total, killed: $killed, survived: $survived, stale or not building: $broken" |
    tee -a "$report"
[ "$broken" -eq 0 ] || exit 2
[ "$survived" -eq 0 ]
