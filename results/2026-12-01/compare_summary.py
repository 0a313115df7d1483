#!/usr/bin/env python3
"""Medians (min-max) of compare_prev.sh's runs, A (previous commit) vs B, and B/A."""
import glob, json, statistics, sys

out = sys.argv[1]
def pvp(tag):
    return [json.load(open(f))["cells"][0]["mpps"]["median"]
            for f in sorted(glob.glob(f"{out}/pvp-{tag}-*.json"))]
def relay(tag, variant):
    v = []
    for f in sorted(glob.glob(f"{out}/relay-{tag}-*.json")):
        for c in json.load(open(f))["columns"]:
            if c["variant"] == variant:
                v += [r["iperf3"][0]["gbps"] for r in c["rounds"] if r.get("iperf3")]
    return v
def row(name, a, b):
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {name} | {ma:.2f} ({min(a):.2f}–{max(a):.2f}) | {mb:.2f} ({min(b):.2f}–{max(b):.2f}) "
          f"| {mb / ma:.3f} | {len(a)} / {len(b)} |")
print("| figure | A: previous commit, median (min–max) | B: this commit | B/A | runs |")
print("|---|---:|---:|---:|---:|")
row("PVP poll 64 B, queue 256, weight 256, Mpps", pvp("A"), pvp("B"))
for v in ("napi", "napi+direct"):
    row(f"relay 1 flow, {v}, Gbit/s", relay("A", v), relay("B", v))
