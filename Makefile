# pvnet — developer and CI entry points. See README.md.
#
#   make            release + asan + fuzz builds (the default goal, `build`; the ASan tree
#                   builds only what its ctest runs: target pvnet_tests)
#   make test       deps, all builds (+ tsan), ctest (release, asan, tsan), fuzz each target
#   make run        deps, release build, then $(RUN_CMD)
#   make deps       install missing Debian packages (no-op when all present)
#   make bench      every experiment the docs show into results/<date>-<commit>/, docs re-rendered
#                   (root; QUICK=1: a short smoke run, docs untouched)
#   make bench-compare BASE=<commit>  this tree against BASE on the headline cells (PVP,
#                   bench vhost-user, the relay), interleaved A B A B, same-round ratios
#                   (root; tools/bench-compare.py; ROUNDS=5, CELLS=pvp,vhost-user,relay)
#
# Variables (override on the command line, e.g. `make test FUZZ_SECONDS=30`):
#   FUZZ_SECONDS    seconds per fuzz target in `make test` (default 5: 10 targets)
#   FUZZ_ARGS       extra libFuzzer flags (default -timeout=10: a slow input is a hang)
#   JOBS            parallel build and ctest jobs (default 2)
#   CTEST_TIMEOUT   per-test timeout in seconds (default 600)
#   ASAN_CTEST_ARGS extra ctest args for the ASan run (default -LE slow)
#   TSAN_OPTIONS_EXTRA more TSAN_OPTIONS for `make test-tsan` (e.g. history_size=4)
#   RUN_CMD         what `make run` executes after the release build
#   BASE, ROUNDS, CELLS  `make bench-compare`: the commit, rounds (default 5), a subset of
#                   pvp,vhost-user,relay (default all)

SHELL := /bin/bash
.DEFAULT_GOAL := build

BUILD_ROOT      ?= build
FUZZ_SECONDS    ?= 5
FUZZ_ARGS       ?= -timeout=10 -close_fd_mask=2
JOBS            ?= 2
CTEST_TIMEOUT   ?= 600
ASAN_CTEST_ARGS ?= -LE slow
RUN_CMD         ?= setsid -w ./$(BUILD_ROOT)/release/src/app/pvnet bench pvp --frame-bytes 64 --queue-sizes 256 --weights baseline,256 --repeat 3 --seconds 0.5

RELEASE_DIR := $(BUILD_ROOT)/release
ASAN_DIR    := $(BUILD_ROOT)/asan
FUZZ_DIR    := $(BUILD_ROOT)/fuzz
TSAN_DIR    := $(BUILD_ROOT)/tsan
CORPUS_DIR  := tests/fuzz/corpus

# iproute2, iperf3 and iputils-ping: the relay tests (tests/relay/); ethtool: tap_port_test;
# ccache: every tree compiles through it (CMAKE_CXX_COMPILER_LAUNCHER), so a rebuild on the same
# machine is fast; python3: the docs_tables test (tools/render_tables.py); dpdk: testpmd as virtio-user client
# (tests/bench/vhost_user_peer_test); qemu-system-x86, busybox-static, cpio, kmod, xz-utils:
# the QEMU guest tests (tests/qemu/, tools/qemu-guest/build-guest.sh).
DEB_PACKAGES := build-essential cmake ninja-build g++ clang-14 libclang-rt-14-dev llvm-14 \
                libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev \
                libfmt-dev liburing-dev pkg-config ccache \
                iproute2 iperf3 iputils-ping ethtool python3 \
                dpdk dpdk-dev qemu-system-x86 busybox-static cpio kmod xz-utils
# Only the benches need these: DPDK's testpmd (the PVP baseline), gnuplot, sockperf
# (the relay bench, which uses iperf3 and ping as well), python3 (tools/render_tables.py).
BENCH_PACKAGES := dpdk dpdk-dev gnuplot-nox sockperf iperf3 iputils-ping python3
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

# --no-tests=error: a run that selects nothing (a renamed label, an empty build) fails.
CTEST := ctest --output-on-failure --no-tests=error --timeout $(CTEST_TIMEOUT) -j $(JOBS)

.PHONY: all deps bench-deps bench bench-compare build release asan tsan fuzz test test-release test-asan test-tsan test-fuzz run clean

all: build

# A fresh machine's apt lists can be empty: update before installing, only when needed.
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q '^install ok installed$$' \
	        || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing$$missing"; \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	fi

bench-deps:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(BENCH_PACKAGES)"

build: release asan fuzz

# The release tree's flags; bench-compare builds BASE with them too, so ccache hits.
RELEASE_FLAGS := -G Ninja -DCMAKE_BUILD_TYPE=Release
release: deps
	CXX=g++ cmake -S . -B $(RELEASE_DIR) $(RELEASE_FLAGS)
	cmake --build $(RELEASE_DIR) -j$(JOBS)

# What ctest runs (target pvnet_tests: the test and replay binaries, pvnet), not the
# benchmark tools, which the release tree builds.
asan: deps
	CXX=g++ cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPVNET_SANITIZE=ON
	cmake --build $(ASAN_DIR) -j$(JOBS) --target pvnet_tests

# ThreadSanitizer for every test that starts threads: the test binaries labelled
# `threads` (pvnet_add_test(... LABELS threads), tests/*/CMakeLists.txt) are the
# dependencies of pvnet_threads_tests (cmake/pvnet_test.cmake); a new threaded test
# joins by its label, nothing to list here.
tsan: deps
	CXX=g++ cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPVNET_TSAN=ON
	cmake --build $(TSAN_DIR) -j$(JOBS) --target pvnet_threads_tests

fuzz: deps
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_DIR) -G Ninja \
	    -DPVNET_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_DIR) -j$(JOBS)

# Builds first (all three), then the test stages in order; the first failure stops make.
test: build
	$(MAKE) --no-print-directory test-release
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-tsan
	$(MAKE) --no-print-directory test-fuzz

test-release:
	cd $(RELEASE_DIR) && $(CTEST)

test-asan:
	cd $(ASAN_DIR) && $(CTEST) $(ASAN_CTEST_ARGS)

# Every test labelled `threads`. Reports go to files (log_path), not stderr, so a race
# in a child process is caught too: the relay tests run the TSan-built `pvnet relay`
# with its output in a pipe. halt_on_error: the racing process exits (66) at its first
# report, failing its test; any report file fails the target, after printing it.
TSAN_REPORTS := $(abspath $(TSAN_DIR))/tsan-reports
TSAN_OPTIONS_EXTRA ?=
test-tsan: tsan
	@rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	@cd $(TSAN_DIR) && \
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 log_path=$(TSAN_REPORTS)/report $(TSAN_OPTIONS_EXTRA)" \
	    $(CTEST) -L '^threads$$'; rc=$$?; \
	reports=$$(find $(TSAN_REPORTS) -type f | sort); \
	for r in $$reports; do echo "=== $$r"; cat "$$r"; done; \
	if [ -n "$$reports" ]; then \
	    echo "test-tsan: $$(echo "$$reports" | wc -l) ThreadSanitizer report file(s) in $(TSAN_REPORTS)"; \
	    exit 1; \
	fi; \
	exit $$rc

# Every executable named fuzz_* in the fuzz build is fuzzed; nothing to list here.
# libFuzzer writes new inputs into the first corpus dir, so it gets a scratch copy
# (build/fuzz/corpus-new/<name>) and the committed corpus is never modified.
test-fuzz:
	@set -u; \
	targets=$$(find $(FUZZ_DIR)/tests/fuzz -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x 2>/dev/null | sort); \
	if [ -z "$$targets" ]; then echo "test-fuzz: no fuzz_* targets in $(FUZZ_DIR)/tests/fuzz"; exit 1; fi; \
	n=0; \
	for bin in $$targets; do \
	    name=$$(basename "$$bin"); name=$${name#fuzz_}; \
	    work=$(FUZZ_DIR)/corpus-new/$$name; art=$(FUZZ_DIR)/artifacts/$$name; \
	    mkdir -p "$$work" "$$art"; \
	    if [ -d "$(CORPUS_DIR)/$$name" ]; then cp -R "$(CORPUS_DIR)/$$name/." "$$work/"; fi; \
	    echo "=== fuzz $$name: $(FUZZ_SECONDS)s over $$work"; \
	    UBSAN_OPTIONS=print_stacktrace=1 "$$bin" -max_total_time=$(FUZZ_SECONDS) \
	        -print_final_stats=1 -artifact_prefix="$$art/" $(FUZZ_ARGS) "$$work" \
	        || { echo "test-fuzz: $$name FAILED (artifacts in $$art/)"; exit 1; }; \
	    n=$$((n + 1)); \
	done; \
	echo "test-fuzz: $$n target(s) fuzzed for $(FUZZ_SECONDS)s each, no crash"

run: release
	$(RUN_CMD)

# Every experiment the docs show (tools/bench.sh, root: testpmd needs hugepages, the
# relay namespaces), into results/<date>-<commit>/, then the docs' tables and plots
# re-rendered from it (tools/render_tables.py). QUICK=1: one short round of each into
# $(BUILD_ROOT)/bench-quick/, docs untouched — a smoke check.
QUICK       ?=
BENCH_STAMP := $(shell date -u +%F)-$(shell git rev-parse --short=7 HEAD 2>/dev/null || echo nogit)
BENCH_OUT   ?= $(if $(QUICK),$(BUILD_ROOT)/bench-quick/$(BENCH_STAMP),results/$(BENCH_STAMP))
DOC_PAGES   := README.md $(wildcard docs/*.md)
PVNET       := ./$(BUILD_ROOT)/release/src/app/pvnet
bench: release bench-deps
	PVNET=$(PVNET) tools/bench.sh $(BENCH_OUT) $(if $(QUICK),quick)
ifeq ($(QUICK),)
	python3 tools/render_tables.py --results $(BENCH_OUT) $(DOC_PAGES)
else
	@# The renderers run on the quick data too, into a preview copy of the pages.
	rm -rf $(BENCH_OUT)/preview && mkdir -p $(BENCH_OUT)/preview && cp $(DOC_PAGES) $(BENCH_OUT)/preview/
	python3 tools/render_tables.py --results $(BENCH_OUT) $(BENCH_OUT)/preview/*.md
	@echo "bench: quick run in $(BENCH_OUT); docs rendered from it in $(BENCH_OUT)/preview/"
endif

# A regression guard for a change: BASE built in a work tree at
# $(BUILD_ROOT)/bench-base/<sha> (reused), HEAD's pvnet in $(RELEASE_DIR), then each
# headline cell run once per round by BASE's binary and once by HEAD's, in one boosted
# autogroup per run; the table and its JSON go to $(BUILD_ROOT)/bench-compare/<base>-<head>-<time>/.
# Root: testpmd's hugepages (vhost-user), the relay's namespaces. Wrap it in the machine's
# bench lock when others share it (flock /tmp/pvnet-bench.lock make bench-compare ...).
BASE   ?=
ROUNDS ?= 5
CELLS  ?= pvp,vhost-user,relay
bench-compare: bench-deps
	@[ -n "$(BASE)" ] || { echo "usage: make bench-compare BASE=<commit> [ROUNDS=5] [CELLS=pvp,vhost-user,relay]" >&2; exit 2; }
	setsid -w bash -c 'echo -20 > /proc/self/autogroup; exec "$$@"' _ \
	    python3 tools/bench-compare.py --base "$(BASE)" --rounds "$(ROUNDS)" --cells "$(CELLS)" \
	        --build-root "$(BUILD_ROOT)" --jobs "$(JOBS)" --cmake-flags "$(RELEASE_FLAGS)"

clean:
	rm -rf $(BUILD_ROOT)
