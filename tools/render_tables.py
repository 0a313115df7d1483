#!/usr/bin/env python3
"""Renders the docs' result tables from `pvnet bench` JSON, so that a table
cannot drift from its data.

A table in a markdown file is a block

    <!-- pvnet-table NAME results/DIR -->
    ...generated, never edited by hand...
    <!-- /pvnet-table -->

NAME picks a renderer below, results/DIR the folder of JSON it reads.

    tools/render_tables.py [--results results/DIR] [--check] FILE...

--results: render every block from this folder (and name it in the block);
without it each block is re-rendered from the folder it names.
--check: change nothing; exit 1 if any block differs from its rendering.
"""
import argparse
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"<!-- pvnet-table (\S+) (\S+) -->\n(.*?)<!-- /pvnet-table -->", re.S)


class Data:
    def __init__(self, rel):
        self.rel = rel.rstrip("/")
        self.path = os.path.join(ROOT, self.rel)
        self.cache = {}

    def json(self, name):
        if name not in self.cache:
            with open(os.path.join(self.path, name + ".json")) as f:
                self.cache[name] = json.load(f)
        return self.cache[name]

    @staticmethod
    def gbench_meta(j):
        """Google Benchmark's context, in bench_meta()'s shape."""
        c = j.get("context", {})
        return {"commit": c.get("commit", "unknown"), "date": c.get("date", "?"),
                "command_line": [c.get("executable", "?"), "(Google Benchmark)"],
                "machine": {"vcpus": c.get("num_cpus", "?"), "cpu_model": f"{c.get('mhz_per_cpu', '?')} MHz",
                            "kernel": "?"}}

    def source(self, *names):
        """The line under a table: where its numbers came from."""
        metas = [self.json(n).get("meta") or self.gbench_meta(self.json(n)) for n in names]
        commits = sorted({m.get("commit", "unknown") for m in metas})
        files = ", ".join(f"`{self.rel}/{n}.json`" for n in names)
        m = metas[0]
        machine = m.get("machine", {})
        cmds = "; ".join("`" + " ".join(["pvnet"] + mm.get("command_line", [])[1:]) + "`"
                         for mm in metas)
        return (f"\n<sub>Data: {files}, commit {', '.join(commits)}, {m.get('date', '?')}, "
                f"{machine.get('vcpus', '?')} vCPUs ({machine.get('cpu_model', '?')}), kernel "
                f"{machine.get('kernel', '?')}. Command: {cmds}.</sub>\n")


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def ok_runs(cell):
    return [r for r in cell.get("runs", []) if r.get("ok")]


def fmt(x, digits):
    if x != x:  # nan
        return "n/a"
    return f"{x:,.{digits}f}"


def mmm(xs, digits):
    """median (min–max)"""
    if not xs:
        return "n/a"
    return f"{fmt(med(xs), digits)} ({fmt(min(xs), digits)}–{fmt(max(xs), digits)})"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


# ---- seed 001: PVP, testpmd, fairness ---------------------------------------

def pvp_event(d, frame):
    j = d.json("pvp-event")
    cells = [c for c in j["cells"] if c["frame_bytes"] == frame]
    queues = sorted({c["queue_size"] for c in cells})
    weights = list(dict.fromkeys(c["weight"] for c in cells))
    best = {}
    for q in queues:
        meds = {c["weight"]: med([r["mpps"] for r in ok_runs(c)]) for c in cells if c["queue_size"] == q}
        best[q] = max(meds, key=lambda w: meds[w])
    rows = []
    for w in weights:
        row = [w]
        for q in queues:
            c = next(c for c in cells if c["weight"] == w and c["queue_size"] == q)
            s = mmm([r["mpps"] for r in ok_runs(c)], 2)
            row.append(f"**{s}**" if best[q] == w else s)
        rows.append(row)
    return (f"Mpps, {j['mode']} mode, medians of {j['repeat']} (min–max), best per queue size in bold:\n\n"
            + table([f"{frame}-byte frames"] + [f"queue {q}" for q in queues], rows) + d.source("pvp-event"))


def pvp_per_packet(d):
    j = d.json("pvp-event")
    rows = []
    for c in j["cells"]:
        if c["frame_bytes"] != 64:
            continue
        rs = ok_runs(c)
        rows.append([str(c["queue_size"]), c["weight"],
                     fmt(med([r["backend_cpu_ns_per_pkt"] for r in rs]), 1),
                     fmt(med([r["frontend_cpu_ns_per_pkt"] for r in rs]), 1),
                     fmt(med([r["kicks_per_pkt"] for r in rs]), 4),
                     fmt(med([r["interrupts_per_pkt"] for r in rs]), 4),
                     f"{sum(r['drop_tx_full'] for r in rs):,}",
                     f"{sum(r['lost'] for r in rs):,}",
                     f"{sum(r['corrupt'] + r['reordered'] for r in rs):,}"])
    return ("64-byte frames, per packet (medians); drops summed over the runs:\n\n"
            + table(["queue", "weight", "backend ns CPU", "guest ns CPU", "kicks", "interrupts",
                     "drops: tx ring full", "sink: sequence gaps", "sink: corrupt + reordered"], rows) + d.source("pvp-event"))


def pvp_poll(d):
    j = d.json("pvp-poll")
    queues = sorted({c["queue_size"] for c in j["cells"]})
    tp = {t["queue_size"]: t.get("runs", []) for t in j.get("testpmd", [])}

    def cell(w, q):
        return next(c for c in j["cells"] if c["weight"] == w and c["queue_size"] == q)

    rows = {"testpmd": [], "pvnet weight 256": [], "pvnet / testpmd (same round)": [], "pvnet baseline": []}
    for q in queues:
        t = [r["mpps"] for r in tp.get(q, []) if r.get("ok")]
        rows["testpmd"].append(mmm(t, 2))
        p = cell("weight 256", q)["runs"]
        rows["pvnet weight 256"].append(mmm([r["mpps"] for r in p if r["ok"]], 2))
        ratio = [a["mpps"] / b["mpps"] for a, b in zip(p, tp.get(q, []))
                 if a.get("ok") and b.get("ok") and b["mpps"] > 0]
        rows["pvnet / testpmd (same round)"].append(mmm(ratio, 2))
        rows["pvnet baseline"].append(mmm([r["mpps"] for r in cell("baseline", q)["runs"] if r["ok"]], 2))
    return (f"Mpps, 64-byte frames, poll mode, medians of {j['repeat']} (min–max):\n\n"
            + table(["64-byte frames, poll mode"] + [f"queue {q}" for q in queues],
                    [[k] + v for k, v in rows.items()]) + d.source("pvp-poll"))


def fairness(d):
    j = d.json("fairness")
    rows = []
    for c in j["cells"]:
        rs = ok_runs(c)
        rows.append([str(c["queue_size"]), c["weight"],
                     fmt(med([r["tx_offered_pps"] for r in rs]), 0),
                     fmt(med([r["tx_delivered_pps"] for r in rs]), 0),
                     fmt(med([r["rx_mpps"] for r in rs]), 2),
                     fmt(med([r["lat_p50_us"] for r in rs]), 1),
                     mmm([r["lat_p99_us"] for r in rs], 1),
                     fmt(max([r["lat_max_us"] for r in rs], default=float("nan")), 0),
                     f"{sum(r['tx_lost'] for r in rs):,}"])
    return (f"{j['mode'].capitalize()} mode, tx at {j['tx_pps']:,} frames/s under the rx flood, medians of "
            f"{j['repeat']}; max is the largest over all runs:\n\n"
            + table(["queue", "weight", "tx sent/s", "tx done/s", "rx Mpps", "p50 µs", "p99 µs (min–max)",
                     "max µs", "tx lost"], rows) + d.source("fairness"))


# ---- seed 000: stream, RR, at-rx --------------------------------------------

VARIANTS = ["upstream", "napi", "napi+coalesce", "napi+at-rx", "napi+both"]


def by_variant(j, flows, busy=None):
    out = {}
    for c in j["cells"]:
        if c["flows"] != flows:
            continue
        if busy is not None and c.get("busyloop_usecs", 0) != busy:
            continue
        out[c["variant"]] = ok_runs(c)
    return out


def variant_rows(j, flows, spec):
    cols = by_variant(j, flows)
    names = [v for v in VARIANTS if v in cols]
    rows = []
    for label, f in spec:
        rows.append([f"{flows} flow{'s' if flows > 1 else ''} {label}"] + [f(cols[v]) for v in names])
    return names, rows


def field(name, digits, scale=1.0, ranged=False):
    def f(rs):
        xs = [r[name] * scale for r in rs]
        return mmm(xs, digits) if ranged else fmt(med(xs), digits)
    return f


def pair(a, b, digits):
    return lambda rs: f"{fmt(med([r[a] for r in rs]), digits)} / {fmt(med([r[b] for r in rs]), digits)}"


def stream(d):
    j = d.json("stream")
    gb = j.get("work", {}).get("payload_gbytes", 0)
    all_rows, names = [], []
    for flows in sorted({c["flows"] for c in j["cells"]}):
        spec = [("goodput Gbit/s", field("goodput_gbps", 2, ranged=True)),
                ("frame Gbit/s", field("frame_gbps", 2))]
        if gb:
            spec.append((f"Gcycles per run ({gb:g} GB)", field("gcycles", 2)))
        spec += [("cycles/pkt", field("cycles_per_pkt", 0)),
                 ("interrupts/s (tx)", pair("interrupts_per_s", "tx_interrupts_per_s", 0)),
                 ("tx reaped at rx %", field("tx_reaped_at_rx", 0, 100)),
                 ("sndbuf stalls/s", field("sndbuf_stalls_per_s", 0))]
        names, rows = variant_rows(j, flows, spec)
        all_rows += rows
    return (f"Medians of {j['repeat']}; goodput (min–max) is UDP payload, frame Gbit/s the Ethernet frames; "
            f"cycles are both threads' CPU time × the rdtsc rate"
            + (f", Gcycles for a fixed {gb:g} GB of payload per run" if gb else "") + ":\n\n"
            + table(["stream"] + names, all_rows) + d.source("stream"))


def rr(d):
    j = d.json("rr")
    per_flow = j.get("work", {}).get("trans_per_flow", 0)
    all_rows, names = [], []
    for flows in sorted({c["flows"] for c in j["cells"]}):
        spec = [("trans/s", field("trans_per_s", 0, ranged=True)),
                ("p50 / p99 µs", pair("p50_us", "p99_us", 1))]
        if per_flow:
            spec.append((f"Gcycles per run ({per_flow * flows:,} trans)", field("gcycles", 3)))
        spec += [("cycles/trans", field("cycles_per_pkt", 0)),
                 ("interrupts/s (tx)", pair("interrupts_per_s", "tx_interrupts_per_s", 0)),
                 ("timer fires/s", field("coalesce_timer_fires_per_s", 0))]
        names, rows = variant_rows(j, flows, spec)
        all_rows += rows
    return (f"Closed loop (one request outstanding per flow), medians of {j['repeat']}"
            + (f", Gcycles for a fixed {per_flow:,} transactions per flow per run" if per_flow else "") + ":\n\n"
            + table(["RR"] + names, all_rows) + d.source("rr"))


def rr_paced(d):
    j = d.json("rr-paced")
    flows = j["cells"][0]["flows"]
    spec = [("offered / achieved req/s", pair("offered_per_s", "pkts_per_s", 0)),
            ("p50 / p99 µs", pair("p50_us", "p99_us", 1)),
            ("p99 µs min–max", lambda rs: f"{fmt(min(r['p99_us'] for r in rs), 1)}–{fmt(max(r['p99_us'] for r in rs), 1)}"),
            ("send lag p50 / p99 µs", pair("send_lag_p50_us", "send_lag_p99_us", 1)),
            ("cycles/trans", field("cycles_per_pkt", 0)),
            ("interrupts/s (tx)", pair("interrupts_per_s", "tx_interrupts_per_s", 0)),
            ("coalescing timer fires/s", field("coalesce_timer_fires_per_s", 0))]
    names, rows = variant_rows(j, flows, spec)
    return (f"Open loop at {j['rr_rate']:,} requests/s: every request sent at its planned time (or as soon "
            f"after as it can), latency from the planned time; send lag is how late requests left (part of "
            f"the latency). Medians of {j['repeat']}:\n\n"
            + table([f"RR at {j['rr_rate']:,} requests/s"] + names, rows) + d.source("rr-paced"))


def rr_busy(d):
    j = d.json("rr-busy")
    rows = []
    for v in VARIANTS:
        cells = {c["busyloop_usecs"]: c["runs"] for c in j["cells"] if c["variant"] == v}
        if 0 not in cells:
            continue
        for u, runs in cells.items():
            if u == 0:
                continue
            sleep = cells[0]
            ratio = [b["trans_per_s"] / a["trans_per_s"] for a, b in zip(sleep, runs)
                     if a["ok"] and b["ok"] and a["trans_per_s"] > 0]
            rows.append([v, str(u),
                         fmt(med([r["trans_per_s"] for r in sleep if r["ok"]]), 0),
                         fmt(med([r["trans_per_s"] for r in runs if r["ok"]]), 0),
                         mmm(ratio, 2),
                         pair("p50_us", "p99_us", 1)([r for r in sleep if r["ok"]]),
                         pair("p50_us", "p99_us", 1)([r for r in runs if r["ok"]])])
    return (f"1 flow closed-loop RR, each variant sleeping and busy polling (both sides spin U µs) in the "
            f"same round, {j['repeat']} rounds; the ratio is busy / sleeping within a round, median "
            f"(min–max):\n\n"
            + table(["variant", "U µs", "sleeping trans/s", "busy trans/s", "busy / sleeping",
                     "sleeping p50 / p99 µs", "busy p50 / p99 µs"], rows) + d.source("rr-busy"))


def atrx(d):
    names = []
    rows = []
    for w in (256, 8):
        for s in (0, 500):
            n = f"atrx-w{w}-s{s}"
            names.append(n)
            cols = by_variant(d.json(n), 1)
            napi, at = cols.get("napi", []), cols.get("napi+at-rx", [])
            rows.append([f"{w}, {s / 1000:g} µs" if s else f"{w}, 0"]
                        + [fmt(med([r["tx_interrupts_per_s"] for r in x]), 0) for x in (napi, at)]
                        + [fmt(med([r["goodput_gbps"] for r in x]), 2) for x in (napi, at)]
                        + [fmt(med([r["cycles_per_pkt"] for r in x]), 0) for x in (napi, at)])
    return ("Stream, 1 flow, medians; `--tx-weight` (packets the backend completes before it serves the "
            "ACKs) and `--server-ns` (the server's cost per frame):\n\n"
            + table(["tx weight, server cost", "napi tx irq/s", "napi+at-rx tx irq/s", "napi goodput Gbit/s",
                     "napi+at-rx goodput Gbit/s", "napi cycles/pkt", "napi+at-rx cycles/pkt"], rows)
            + d.source(*names))


# ---- seed 002: the relay -------------------------------------------------------

def relay_columns(j):
    return [(c["variant"], c.get("veth", False), [r for r in c.get("rounds", []) if "setup_error" not in r])
            for c in j["columns"]]


def relay(d):
    j = d.json("relay")
    cols = relay_columns(j)
    rows = []
    for fi, flows in enumerate(j["flows"]):
        label = f"{flows} flow{'s' if flows > 1 else ''}"

        def iperf(key, digits, ranged=False, veth_na=False):
            out = []
            for _, veth, rounds in cols:
                xs = [r["iperf3"][fi][key] for r in rounds
                      if fi < len(r.get("iperf3", [])) and key in r["iperf3"][fi]]
                out.append("n/a" if veth and veth_na else (mmm(xs, digits) if ranged else fmt(med(xs), digits)))
            return out
        rows.append([f"{label} Gbit/s"] + iperf("gbps", 2, ranged=flows == 1))
        rows.append([f"{label} bytes/pkt"] + iperf("bytes_per_pkt", 0))
        rows.append([f"{label} cycles/byte"] + iperf("cycles_per_byte", 2, veth_na=True))
    for proto in ("udp", "tcp"):
        out = []
        for _, _, rounds in cols:
            sp = [r[f"sockperf_{proto}"] for r in rounds if "p50_us" in r.get(f"sockperf_{proto}", {})]
            out.append(" / ".join(fmt(med([x[k] for x in sp]), 0) for k in ("p50_us", "p99_us", "p999_us")))
        rows.append([f"{proto.upper()} 64 B p50 / p99 / p99.9 µs"] + out)
    return (f"Medians of {j['repeat']} rounds (1 flow: min–max), columns interleaved per round; iperf3 "
            f"{j['seconds']:g} s per run, sockperf ping-pong {j['latency_seconds']:g} s; cycles/byte is the "
            f"relay process's run time (schedstat) × the rdtsc rate per byte received:\n\n"
            + table([""] + [c[0] for c in cols], rows) + d.source("relay"))


def relay_ping(d):
    j = d.json("relay")
    rows = []
    for name, _, rounds in relay_columns(j):
        row = [name]
        for direction in ("a_to_b", "b_to_a"):
            ps = [r["ping"][direction] for r in rounds if r.get("ping", {}).get(direction, {}).get("avg_ms") is not None]
            row.append(" / ".join(fmt(med([p[k] for p in ps]), 3) for k in ("min_ms", "avg_ms", "max_ms", "mdev_ms")))
            loss = [r["ping"][direction]["loss_pct"] for r in rounds if "loss_pct" in r.get("ping", {}).get(direction, {})]
            row.append(fmt(max(loss, default=float("nan")), 1))
        rows.append(row)
    return (f"`ping -i {j.get('ping_interval_s', 0.1):g}`, {j['ping_count']} per direction and round, rtt "
            f"min / avg / max / mdev in ms (medians of {j['repeat']} rounds), loss the worst round's; A is the "
            f"guest tap's namespace (the VPN client's tun), B the host tap's:\n\n"
            + table(["", "A → B rtt ms", "A → B loss %", "B → A rtt ms", "B → A loss %"], rows)
            + d.source("relay"))


# ---- the README's one line per seed --------------------------------------------

def summary(d):
    rows = []
    try:
        pe = d.json("pvp-event")

        def mp(w, q):
            c = next(c for c in pe["cells"] if c["frame_bytes"] == 64 and c["weight"] == w and c["queue_size"] == q)
            return med([r["mpps"] for r in ok_runs(c)])
        q = max(c["queue_size"] for c in pe["cells"])
        rows.append(["[001](docs/seed-001-packet-weight.md) packet weight on rx and tx",
                     f"PVP 64 B, queue {q}: weight 256 {fmt(mp('weight 256', q), 2)} Mpps against the "
                     f"baseline's {fmt(mp('baseline', q), 2)} ({fmt(mp('weight 256', q) / mp('baseline', q), 2)}×)"])
    except (KeyError, StopIteration, FileNotFoundError, ZeroDivisionError):
        pass
    try:
        a = by_variant(d.json("atrx-w8-s500"), 1)
        st = by_variant(d.json("stream"), 1)
        napi = med([r["tx_interrupts_per_s"] for r in a["napi"]])
        at = med([r["tx_interrupts_per_s"] for r in a["napi+at-rx"]])
        rows.append(["[000](docs/seed-000-tx-completion.md) tx NAPI, coalescing, at-rx",
                     f"1 flow stream: upstream {fmt(med([r['goodput_gbps'] for r in st['upstream']]), 1)}, napi "
                     f"{fmt(med([r['goodput_gbps'] for r in st['napi']]), 1)} Gbit/s goodput; at-rx cuts tx "
                     f"interrupts {fmt(napi, 0)} → {fmt(at, 0)}/s when ACKs interleave with a slow device"])
    except (KeyError, FileNotFoundError):
        pass
    try:
        j = d.json("relay")
        cols = {n: rounds for n, _, rounds in relay_columns(j)}

        def g(n):
            return med([r["iperf3"][0]["gbps"] for r in cols.get(n, []) if r.get("iperf3") and "gbps" in r["iperf3"][0]])

        def ping(n):
            return med([r["ping"]["a_to_b"]["avg_ms"] for r in cols.get(n, [])
                        if r.get("ping", {}).get("a_to_b", {}).get("avg_ms") is not None])
        rows.append(["[002](docs/seed-002-tun-rings.md) tun I/O through rings, the direct path",
                     f"1 flow TCP: plain tun relay {fmt(g('plain'), 1)}, rings {fmt(g('napi+at-rx'), 1)}, "
                     f"+ direct {fmt(g('napi+at-rx+direct'), 1)} Gbit/s (veth {fmt(g('veth'), 1)}); ping A → B avg "
                     f"{fmt(ping('plain'), 3)} / {fmt(ping('napi+at-rx'), 3)} / {fmt(ping('napi+at-rx+direct'), 3)} ms"])
    except (KeyError, FileNotFoundError):
        pass
    try:
        parts = []
        for name, where in (("xps", "in process"), ("xps-relay", "through the relay")):
            j = d.json(name)
            # The lowest thread count at its lower rate: the seed's light-load cell.
            c0 = min(j["cells"], key=lambda c: (c["threads"], c["rate"]))
            by = {c["variant"]: c for c in j["cells"]
                  if (c["threads"], c["rate"]) == (c0["threads"], c0["rate"])}

            def m(v, k):
                return med([r[k] for r in ok_runs(by[v])])
            parts.append(f"{where}, {c0['threads']} threads at {c0['rate']}/s: replies on the "
                         f"request's queue {fmt(100 * m('default', 'same_queue_share'), 0)}% → "
                         f"{fmt(100 * m('symmetric', 'same_queue_share'), 0)}%, p50 "
                         f"{fmt(m('default', 'p50_us'), 0)} → {fmt(m('symmetric', 'p50_us'), 0)} µs")
        rows.append(["[003](docs/seed-003-xps.md) XPS by rx queue", "; ".join(parts)])
    except (KeyError, FileNotFoundError, ValueError):
        rows.append(["[003](docs/seed-003-xps.md) XPS by rx queue",
                     "default XPS against symmetric queues, in process and through the relay: "
                     "see its page"])
    try:
        by = grants_cells(d.json("grants"))

        def s(g, v):
            return med([r["sum"] for r in by.get(("tx", g, v), [])])
        rows.append(["[004](docs/seed-004-grants.md) persistent grants",
                     f"tx, 1 guest: persistent {fmt(s(1, 'persistent'), 0)} Mbit/s against copy "
                     f"{fmt(s(1, 'copy'), 0)} and map {fmt(s(1, 'map'), 0)}; 4 guests: "
                     f"{fmt(s(4, 'persistent'), 0)} / {fmt(s(4, 'copy'), 0)} / {fmt(s(4, 'map'), 0)}"])
    except (KeyError, FileNotFoundError):
        rows.append(["[004](docs/seed-004-grants.md) persistent grants",
                     "map, copy and persistent grants, 1–4 guest processes: see its page"])
    return table(["seed", "headline, from the last `make bench`"], rows) + \
        f"\n<sub>Data: `{d.rel}/` (every file records its commit, command line and machine).</sub>\n"


# ---- the split ring alone ----------------------------------------------------

def microbench(d):
    j = d.json("microbench")
    reps = {}
    for b in j["benchmarks"]:
        if b.get("run_type") == "iteration":
            reps.setdefault(b["run_name"], []).append(b)
    rows = []
    # The benchmark's own order (families as declared), not the random run order.
    order = {n: i for i, n in enumerate(dict.fromkeys(
        b["run_name"] for b in sorted(j["benchmarks"], key=lambda b: b.get("family_index", 0) * 1000
                                      + b.get("per_family_instance_index", 0))))}
    for name, rs in sorted(reps.items(), key=lambda kv: order[kv[0]]):
        ns = [r["ns_per_buf"] for r in rs]
        short = name.replace("/manual_time", "").replace("/real_time", "")
        if "eventfd:0" in short:
            short += " (spinning)"
        kicks = [r["kicks_per_buf"] for r in rs if "kicks_per_buf" in r]
        irqs = [r["interrupts_per_buf"] for r in rs if "interrupts_per_buf" in r]
        rows.append([f"`{short}`", fmt(med(ns), 1), fmt(min(ns), 1), fmt(max(ns), 1),
                     f"{med(kicks):.2g}" if kicks else "—", f"{med(irqs):.2g}" if irqs else "—"])
    return (f"Nanoseconds per buffer, median, min and max of {max(len(r) for r in reps.values())} "
            f"repetitions, variants randomly interleaved:\n\n"
            + table(["benchmark", "median ns/buffer", "min", "max", "kicks/buffer", "interrupts/buffer"], rows)
            + d.source("microbench"))

# ---- issue 11: DPDK virtio-user against testpmd's vhost and pvnet serve ----

def vhost_user(d):
    j = d.json("vhost-user")
    backends = j["backends"]
    pvnet = [b for b in backends if b != "dpdk"]
    # The client's in_order setting is a column once the data has it (issue 24).
    in_order = any("in_order" in c for c in j["cells"])
    rows = []
    for c in j["cells"]:
        row = [str(c["frame_bytes"]), str(c["queue_size"])] + ([str(c["in_order"])] if in_order else [])
        for b in backends:
            row.append(mmm([r["rx_mpps"] for r in ok_runs(c["backends"][b])], 2))
        if "dpdk" in backends:
            d_runs = c["backends"]["dpdk"].get("runs", [])
            for b in pvnet:
                ratio = [p["rx_mpps"] / q["rx_mpps"] for p, q in zip(c["backends"][b].get("runs", []), d_runs)
                         if p.get("ok") and q.get("ok") and q["rx_mpps"] > 0]
                row.append(mmm(ratio, 2))
        for b in pvnet:
            if b.endswith("event"):
                row.append(fmt(med([r["backend_cpu_ns_per_pkt"] for r in ok_runs(c["backends"][b])]), 1))
        rows.append(row)
    header = ["frame B", "queue"] + (["client in_order"] if in_order else []) + [f"{b} Mpps" for b in backends]
    if "dpdk" in backends:
        header += [f"{b} / dpdk" for b in pvnet]
    header += [f"{b} backend ns CPU/pkt" for b in pvnet if b.endswith("event")]
    huge = "2 MiB hugepages" if j.get("hugepages") else "no hugepages"
    # What the client negotiated with each backend, per in_order setting (the same, or it says).
    feats = []
    for io in sorted({c["in_order"] for c in j["cells"] if "in_order" in c}, reverse=True):
        per = {b: sorted({c["backends"][b].get("negotiated", "-") for c in j["cells"] if c.get("in_order") == io})
               for b in backends}
        feats.append(f"in_order={io}: " + "; ".join(f"{b} {' | '.join(v)}" for b, v in per.items()))
    negotiated = ("\nFeatures the client negotiated (its log; rx / tx path): " + ". ".join(feats) + ".\n"
                  if feats else "")
    return (f"Client rx Mpps (the loop's throughput), medians of {j['repeat']} interleaved rounds "
            f"(min–max); ratios within a round; {huge}, backend on CPU {j['backend_cpu']}, client on "
            f"CPU {j['client_cpu']}{'; each in_order setting of the client in the same round' if in_order else ''}:"
            f"\n\n" + table(header, rows) + negotiated + d.source("vhost-user"))


def xps(d, name="xps"):
    j = d.json(name)
    out = []
    groups = {}
    for c in j["cells"]:
        groups.setdefault((c["threads"], c["rate"], c["probed_max"]), {})[c["variant"]] = c
    for (threads, rate, probed), by in groups.items():
        cols = [by.get("default"), by.get("symmetric")]

        def cell(f, digits):
            return [mmm([f(r) for r in ok_runs(c)], digits) if c else "—" for c in cols]

        def rtt(c):
            if not c:
                return "—"
            rs = ok_runs(c)
            return "/".join(str(round(med([r[k] for r in rs])))
                            for k in ("rtt_min_us", "rtt_avg_us", "rtt_max_us"))
        rows = [["RTT min/avg/max (usec)", rtt(cols[0]), rtt(cols[1])],
                ["RTT p50 (usec)"] + cell(lambda r: r["p50_us"], 1),
                ["RTT p99 (usec)"] + cell(lambda r: r["p99_us"], 1),
                ["achieved requests/s"] + cell(lambda r: r["achieved_per_s"], 0),
                ["intr/sec"] + cell(lambda r: r["interrupts_per_s"], 0),
                ["contextswitch/sec"] + cell(lambda r: r["ctx_switches_per_s"], 0),
                ["cycles/request"] + cell(lambda r: r["cycles_per_req"], 0),
                ["replies on the request's queue %"] + cell(lambda r: 100 * r["same_queue_share"], 1),
                ["insn per cycle, cache-misses", "n/a (no hardware counters)", "n/a"]]
        found = f" (highest rate the default sustains: {probed}/s)" if probed else ""
        out.append(f"**{threads} threads, {rate} requests/s**{found}\n\n"
                   + table(["", "Default", "Symmetric queues"], rows))
    where = ("through `pvnet relay`, real sockets" if j.get("transport") == "relay"
             else "in one process")
    return (f"Medians of {j['repeat']} interleaved rounds (min–max), {j['seconds']} s each, "
            f"{where}, {j['flows']} flows over {j['queue_pairs']} queue pairs, server threads "
            f"{'pinned' if j['pinned'] else 'free'}; cycles: {j['cycles_source']}:\n\n"
            + "\n".join(out) + d.source(name))


# ---- seed 004: grants ---------------------------------------------------------

def grants_cells(j):
    by = {}
    for c in j["cells"]:
        by[(c["direction"], c["guests"], c["variant"])] = [r for r in c.get("runs", [])
                                                           if not r.get("error")]
    return by


def grants(d):
    j = d.json("grants")
    by = grants_cells(j)
    guests = sorted({c["guests"] for c in j["cells"]})
    variants = list(dict.fromkeys(c["variant"] for c in j["cells"]))
    out = []
    for direction, what in (("tx", "guests stream to the backend's sink"),
                            ("rx", "the backend's generator streams to the guests")):
        rows = []
        for v in variants:
            for g in guests:
                rs = by.get((direction, g, v), [])
                rows.append([v, str(g), mmm([r["sum"] for r in rs], 0),
                             fmt(med([r["avg"] for r in rs]), 0), fmt(med([r["min"] for r in rs]), 0),
                             fmt(med([r["max"] for r in rs]), 0),
                             fmt(med([r["cpu_ns_per_kib"] for r in rs]), 0),
                             fmt(med([r["map_calls_per_pkt"] for r in rs]), 2),
                             fmt(med([r["copy_calls_per_pkt"] for r in rs]), 2)])
        out.append(f"**{direction}: {what}** (Mbit/s; sum: median (min–max) of rounds)\n\n"
                   + table(["mode", "guests", "sum", "avg", "min", "max", "CPU ns/KiB",
                            "map+unmap calls/pkt", "copy calls/pkt"], rows))
        ratio_rows = []
        for base in ("map", "copy"):
            if base not in variants or "persistent" not in variants:
                continue
            cells = []
            for g in guests:
                p = med([r["sum"] for r in by.get((direction, g, "persistent"), [])])
                b = med([r["sum"] for r in by.get((direction, g, base), [])])
                cells.append(fmt(p / b, 1) + "×" if b == b and b > 0 else "n/a")
            ratio_rows.append([f"persistent / {base}"] + cells)
        if ratio_rows:
            out.append(table([f"{direction}: sum ratio"] + [f"{g} guest{'s' if g > 1 else ''}"
                                                              for g in guests], ratio_rows))
    return (f"Medians of {j['repeat']} interleaved rounds, {j['seconds']} s each, "
            f"{j['frame_bytes']}-byte frames, rings of {j['ring_size']}; CPU: {j['cpu_source']}:\n\n"
            + "\n".join(out) + d.source("grants"))


SEED_004 = {1: (15106.4, 10864.1), 2: (13052.7, 10898.5), 3: (12675.1, 10734.5), 4: (13194.0, 10924.0)}


def grants_compact(d):
    """Sums of guests' Mbit/s beside the seed's (with / without persistent grants)."""
    j = d.json("grants")
    by = grants_cells(j)
    rows = []
    for g in sorted({c["guests"] for c in j["cells"]}):
        def s(direction, v):
            return med([r["sum"] for r in by.get((direction, g, v), [])])
        w, wo = SEED_004.get(g, (float("nan"), float("nan")))
        p, c, m = s("tx", "persistent"), s("tx", "copy"), s("tx", "map")
        rows.append([str(g), f"{fmt(w, 0)} / {fmt(wo, 0)} ({fmt(w / wo, 2)}×)",
                     f"{fmt(p, 0)} / {fmt(c, 0)} / {fmt(m, 0)}",
                     f"{fmt(p / c, 1)}× / {fmt(p / m, 0)}×",
                     f"{fmt(s('rx', 'persistent') / s('rx', 'copy'), 1)}× / "
                     f"{fmt(s('rx', 'persistent') / s('rx', 'map'), 0)}×"])
    return table(["guests", "seed: with / without persistent grants, Mbit/s (ratio)",
                  "pvnet tx: persistent / copy / map, Mbit/s", "tx: persistent ÷ copy / ÷ map",
                  "rx: persistent ÷ copy / ÷ map"], rows) + d.source("grants")


RENDERERS = {
    "microbench": microbench,
    "relay": relay,
    "relay-ping": relay_ping,
    "summary": summary,
    "pvp-event-64": lambda d: pvp_event(d, 64),
    "pvp-event-512": lambda d: pvp_event(d, 512),
    "pvp-event-1518": lambda d: pvp_event(d, 1518),
    "pvp-per-packet": pvp_per_packet,
    "pvp-poll": pvp_poll,
    "fairness": fairness,
    "stream": stream,
    "rr": rr,
    "rr-paced": rr_paced,
    "rr-busy": rr_busy,
    "atrx": atrx,
    "vhost-user": vhost_user,
    "xps": xps,
    "xps-relay": lambda d: xps(d, "xps-relay"),
    "grants": grants,
    "grants-compact": grants_compact,
}


def plot(name):
    def render(d):
        rel_from_docs = os.path.join("..", d.rel, name)
        return f"![{name}]({rel_from_docs})\n"
    return render


for p in ("pvp-event.png", "pvp-poll.png", "relay-throughput.png", "relay-latency.png"):
    RENDERERS["plot:" + p] = plot(p)


def render_file(path, results, check):
    with open(path) as f:
        text = f.read()

    def sub(m):
        name, rel = m.group(1), results or m.group(2)
        if name not in RENDERERS:
            raise SystemExit(f"{path}: unknown table '{name}' (known: {', '.join(sorted(RENDERERS))})")
        body = RENDERERS[name](Data(rel))
        return f"<!-- pvnet-table {name} {rel} -->\n{body}<!-- /pvnet-table -->"

    new = BLOCK.sub(sub, text)
    if new == text:
        return True
    if check:
        print(f"{path}: tables differ from their JSON (run tools/render_tables.py {path})", file=sys.stderr)
        return False
    with open(path, "w") as f:
        f.write(new)
    print(f"rendered {path}", file=sys.stderr)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", help="render every block from this folder (relative to the repository)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs from its rendering")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    results = os.path.relpath(os.path.abspath(a.results), ROOT) if a.results else None
    ok = all([render_file(f, results, a.check) for f in a.files])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
