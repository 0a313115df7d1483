#!/usr/bin/env python3
"""A developer's regression guard: this tree (HEAD) against a BASE commit on
the headline cells of issue 24, interleaved A B A B, with same-round ratios.
`make bench-compare BASE=<commit>` runs it (root: testpmd's hugepages, the
relay's namespaces).

    tools/bench-compare.py --base COMMIT [--rounds 5] [--cells pvp,vhost-user,relay]
                           [--out DIR] [--jobs 2] [--cmake-flags '...']

BASE is checked out detached into BUILD_ROOT/bench-base/<sha> (a git work
tree, reused when present) and built with the release flags; HEAD's release
tree is built in place (target pvnet only, both through ccache). Then every
round runs each cell once with BASE's binary, then once with HEAD's
(`--repeat 1`, the bench's own JSON), each in its own session and boosted
autogroup. Cells:

    pvp         bench pvp 64 B q256 weight 256, poll mode and event mode
    vhost-user  bench vhost-user 64 B q256: dpdk, pvnet-poll, pvnet-event in one round
    relay       bench relay 1 flow TCP: the plain relay (the reference) and the ring relay

The table: per figure, BASE median (min–max), HEAD median (min–max), HEAD/BASE
same-round ratio median (min–max), and the rounds' placement classes (from
the placement probe each run records; a BASE too old to record it counts
HEAD's alone). Written to DIR/compare.txt and DIR/compare.json beside every
run's JSON. Only options every BASE since well before 6407ca9 accepts are
passed, and every field is read defensively.
"""
import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The Makefile's `release` flags (it passes its own with --cmake-flags).
DEFAULT_CMAKE_FLAGS = "-G Ninja -DCMAKE_BUILD_TYPE=Release"
RUN_TIMEOUT_S = 600  # one bench invocation, far above any cell's time

# Each cell's command lines (after `pvnet`); {json} is the run's output file.
# The relay's ring variant: RELAY_VARIANT below.
PVP = ["bench", "pvp", "--frame-bytes", "64", "--queue-sizes", "256", "--weights", "256",
       "--repeat", "1", "--json", "{json}"]
CELLS = {
    "pvp": [("pvp-poll", PVP + ["--mode", "poll"]), ("pvp-event", PVP + ["--mode", "event"])],
    "vhost-user": [("vhost-user", ["bench", "vhost-user", "--frame-bytes", "64", "--queue-sizes",
                                   "256", "--backends", "dpdk,pvnet-poll,pvnet-event",
                                   "--repeat", "1", "--json", "{json}"])],
    "relay": [("relay", ["bench", "relay", "--flows", "1", "--variants", "{relay_variant}",
                         "--skip-veth", "--skip-latency", "--repeat", "1", "--json", "{json}"])],
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def cmake_build(src, build, flags, jobs):
    """Configures `build` from `src` with `flags` and builds target pvnet."""
    cfg = ["cmake", "-S", src, "-B", build, *shlex.split(flags)]
    # A BASE older than the tree's own ccache launcher (CMakeLists.txt) gets
    # the same one, so its objects hit the cache the other work trees filled.
    ccache = shutil.which("ccache")
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        has_launcher = "CCACHE_BASEDIR" in f.read()
    if ccache and not has_launcher:
        cfg.append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={shutil.which('cmake')};-E;env;"
                   f"CCACHE_BASEDIR={src};{ccache}")
    env = dict(os.environ, CXX="g++")
    log(f"=== build {src}: {' '.join(cfg)}")
    subprocess.run(cfg, check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, f"-j{jobs}", "--target", "pvnet"], check=True,
                   env=env)
    return os.path.join(build, "src", "app", "pvnet")


def base_worktree(sha, root):
    """BASE checked out detached at root/<sha>, reused when it is already there."""
    path = os.path.join(root, sha)
    if os.path.isdir(path):
        try:
            if git("rev-parse", "HEAD", cwd=path) == sha:
                return path
        except subprocess.CalledProcessError:
            pass
        raise SystemExit(f"bench-compare: {path} exists but is not a work tree at {sha}; remove it")
    os.makedirs(root, exist_ok=True)
    git("worktree", "prune")  # a work tree removed by `make clean`
    git("worktree", "add", "--detach", path, sha)
    return path


def run_bench(pvnet, argv, json_path, txt_path):
    """One bench invocation in its own session and boosted autogroup (as
    tools/bench.sh runs them); True when it exited 0. Its JSON is read
    whatever the status: a bench writes it before failing on a bad run."""
    cmd = ["setsid", "-w", "bash", "-c", 'echo -20 > /proc/self/autogroup; exec "$@"', "_", pvnet,
           *argv]
    with open(txt_path, "w") as out:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                timeout=RUN_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            log(f"    timed out after {RUN_TIMEOUT_S} s")
            return False
    if rc != 0:
        log(f"    exit status {rc} (see {txt_path})")
    return rc == 0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def placement_of(run):
    p = run.get("placement") if isinstance(run, dict) else None
    return p.get("class") if isinstance(p, dict) else None


# Figures: (name, unit, higher_is_better, extract(json) -> (value or None, placement or None)).
def pvp_fig(j):
    try:
        r = j["cells"][0]["runs"][0]
        return (r["mpps"] if r.get("ok") else None), placement_of(r)
    except (KeyError, IndexError, TypeError):
        return None, None


def vu_run(j, backend):
    try:
        return j["cells"][0]["backends"][backend]["runs"][0]
    except (KeyError, IndexError, TypeError):
        return None


def vu_fig(backend, field="rx_mpps"):
    def f(j):
        r = vu_run(j, backend)
        if not r or not r.get("ok"):
            return None, placement_of(r)
        return r.get(field), placement_of(r)
    return f


def vu_ratio(backend):
    def f(j):
        p, d = vu_run(j, backend), vu_run(j, "dpdk")
        if not p or not d or not p.get("ok") or not d.get("ok") or not d.get("rx_mpps"):
            return None, placement_of(p)
        cls = placement_of(p) if placement_of(p) == placement_of(d) else "mixed"
        return p["rx_mpps"] / d["rx_mpps"], (cls if placement_of(p) else None)
    return f


def relay_round(j, variant):
    try:
        for c in j["columns"]:
            if c.get("variant") == variant:
                return c["rounds"][0]
    except (KeyError, IndexError, TypeError):
        pass
    return None


def relay_gbps(r):
    try:
        return r["iperf3"][0]["gbps"]
    except (KeyError, IndexError, TypeError):
        return None


def relay_fig(variant):
    def f(j):
        r = relay_round(j, variant)
        return (relay_gbps(r) if r else None), placement_of(r)
    return f


def relay_ratio(variant):
    def f(j):
        a, b = relay_round(j, variant), relay_round(j, "plain")
        ga, gb = relay_gbps(a) if a else None, relay_gbps(b) if b else None
        if ga is None or not gb:
            return None, placement_of(a)
        cls = placement_of(a) if placement_of(a) == placement_of(b) else "mixed"
        return ga / gb, (cls if placement_of(a) else None)
    return f


def figures(cell, relay_variant):
    if cell == "pvp-poll":
        return [("pvp poll 64 B q256 w256 Mpps", True, pvp_fig)]
    if cell == "pvp-event":
        return [("pvp event 64 B q256 w256 Mpps", True, pvp_fig)]
    if cell == "vhost-user":
        return [("vhost-user dpdk Mpps (control)", True, vu_fig("dpdk")),
                ("vhost-user pvnet-poll Mpps", True, vu_fig("pvnet-poll")),
                ("vhost-user pvnet-event Mpps", True, vu_fig("pvnet-event")),
                ("vhost-user pvnet-poll / dpdk", True, vu_ratio("pvnet-poll")),
                ("vhost-user pvnet-event / dpdk", True, vu_ratio("pvnet-event")),
                ("vhost-user pvnet-event be ns/pkt", False,
                 vu_fig("pvnet-event", "backend_cpu_ns_per_pkt"))]
    if cell == "relay":
        return [("relay 1 flow plain Gbit/s (reference)", True, relay_fig("plain")),
                (f"relay 1 flow {relay_variant} Gbit/s", True, relay_fig(relay_variant)),
                (f"relay 1 flow {relay_variant} / plain", True, relay_ratio(relay_variant))]
    raise ValueError(cell)


def stat(xs):
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s, digits=3):
    if not s:
        return "-"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def pair_class(base_cls, head_cls):
    """The placement of one A/B step: the class both runs measured, the one
    that did when the other binary has no probe, mixed when they differ."""
    classes = {c for c in (base_cls, head_cls) if c}
    if not classes:
        return "unknown"
    return classes.pop() if len(classes) == 1 else "mixed"


def summarize(steps, relay_variant):
    """steps: [{cell, round, base: json|None, head: json|None}] -> rows."""
    rows = []
    for cell in [c for c in ALL_CELLS if any(s["cell"] == c for s in steps)]:
        for name, higher_better, extract in figures(cell, relay_variant):
            base, head, ratio, classes, by_class = [], [], [], {}, {}
            for s in (s for s in steps if s["cell"] == cell):
                b, bc = extract(s["base"]) if s["base"] else (None, None)
                h, hc = extract(s["head"]) if s["head"] else (None, None)
                if b is not None:
                    base.append(b)
                if h is not None:
                    head.append(h)
                cls = pair_class(bc, hc)
                classes[cls] = classes.get(cls, 0) + 1
                if b is not None and h is not None and b > 0:
                    ratio.append(h / b)
                    by_class.setdefault(cls, []).append(h / b)
            rows.append({"figure": name, "higher_is_better": higher_better, "base": stat(base),
                         "head": stat(head), "head_over_base": stat(ratio),
                         "head_over_base_by_placement": {c: stat(v) for c, v in sorted(by_class.items())},
                         "placement": dict(sorted(classes.items()))})
    return rows


def table(rows, base_label, head_label, rounds):
    digits = lambda r: 1 if "ns/pkt" in r["figure"] else 3
    head = ["figure", f"BASE {base_label}", f"HEAD {head_label}", "HEAD/BASE", "placement",
            "HEAD/BASE by placement"]
    lines = []
    for r in rows:
        lines.append([r["figure"] + ("" if r["higher_is_better"] else " (lower is better)"),
                      fmt(r["base"], digits(r)), fmt(r["head"], digits(r)), fmt(r["head_over_base"]),
                      ", ".join(f"{c} {n}" for c, n in r["placement"].items()),
                      ", ".join(f"{c} {s['median']:.3f} ×{s['n']}"
                                for c, s in r["head_over_base_by_placement"].items()) or "-"])
    widths = [max(len(x[i]) for x in [head] + lines) for i in range(len(head))]
    out = [f"bench-compare: {rounds} rounds, BASE then HEAD per cell and round; medians (min–max); "
           "HEAD/BASE: median (min–max) of same-round ratios; placement: the class of each round's "
           "pair of runs (mixed: they differ)"]
    for x in [head, ["-" * w for w in widths]] + lines:
        out.append("  ".join(v.ljust(w) for v, w in zip(x, widths)).rstrip())
    return "\n".join(out) + "\n"


ALL_CELLS = ["pvp-poll", "pvp-event", "vhost-user", "relay"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the commit to compare against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cells", default="pvp,vhost-user,relay",
                    help="comma-separated subset of: " + ", ".join(CELLS))
    ap.add_argument("--relay-variant", default="napi", help="the ring relay's column")
    ap.add_argument("--out", help="output folder (default BUILD_ROOT/bench-compare/<base>-<head>-<time>)")
    ap.add_argument("--build-root", default=os.path.join(ROOT, "build"),
                    help="BASE's work tree goes to BUILD_ROOT/bench-base/<sha>, HEAD's build to "
                         "BUILD_ROOT/release")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cmake-flags", default=DEFAULT_CMAKE_FLAGS)
    a = ap.parse_args()
    a.build_root = os.path.abspath(a.build_root)

    groups = [c.strip() for c in a.cells.split(",") if c.strip()]
    bad = [c for c in groups if c not in CELLS]
    if bad or not groups:
        raise SystemExit(f"bench-compare: unknown cells {bad}; choose from {', '.join(CELLS)}")
    if a.rounds < 1:
        raise SystemExit("bench-compare: --rounds must be at least 1")
    if os.geteuid() != 0 and any(g in ("vhost-user", "relay") for g in groups):
        raise SystemExit("bench-compare: vhost-user and relay need root (hugepages, namespaces)")
    try:
        sha = git("rev-parse", "--verify", a.base + "^{commit}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"bench-compare: {a.base} is not a commit")
    head_sha = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no") != ""
    base_label = sha[:7]
    head_label = head_sha[:7] + ("-dirty" if dirty else "")

    base_src = base_worktree(sha, os.path.join(a.build_root, "bench-base"))
    base_pvnet = cmake_build(base_src, os.path.join(base_src, "build", "release"), a.cmake_flags,
                             a.jobs)
    head_pvnet = cmake_build(ROOT, os.path.join(a.build_root, "release"), a.cmake_flags, a.jobs)

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = a.out or os.path.join(a.build_root, "bench-compare", f"{base_label}-{head_label}-{stamp}")
    os.makedirs(out, exist_ok=True)
    cells = [(name, argv) for g in groups for name, argv in CELLS[g]]
    steps = []
    for r in range(1, a.rounds + 1):
        for name, argv in cells:
            step = {"cell": name, "round": r}
            for side, pvnet in (("base", base_pvnet), ("head", head_pvnet)):
                stem = os.path.join(out, f"{name}-{side}-{r}")
                args = [x.format(json=stem + ".json", relay_variant=a.relay_variant) for x in argv]
                log(f"=== round {r}/{a.rounds} {name} {side.upper()}: pvnet {' '.join(args)}")
                ok = run_bench(pvnet, args, stem + ".json", stem + ".txt")
                step[side] = load(stem + ".json")
                step[side + "_ok"] = ok
            steps.append(step)

    rows = summarize(steps, a.relay_variant)
    text = table(rows, base_label, head_label, a.rounds)
    print(text, end="")
    with open(os.path.join(out, "compare.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump({"base": sha, "head": head_sha, "head_dirty": dirty, "rounds": a.rounds,
                   "cells": groups, "relay_variant": a.relay_variant, "date": stamp,
                   "commands": {name: argv for name, argv in cells},
                   "failed_runs": [f"{s['cell']}-{side}-{s['round']}" for s in steps
                                   for side in ("base", "head") if not s[side + "_ok"]],
                   "rows": rows}, f, indent=2)
        f.write("\n")
    log(f"bench-compare: runs, compare.txt and compare.json in {out}")


if __name__ == "__main__":
    main()
