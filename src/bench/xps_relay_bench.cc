// One run of the XPS experiment through real sockets (xps_bench.h,
// run_xps_relay_bench): a RelayBed with `pvnet relay --queues 2` and XPS on,
// the udp-rr server behind tap A, the udp-rr client in netns B.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "pvnet/bench/pvp.h"
#include "pvnet/bench/relay_bench.h"
#include "pvnet/bench/xps_bench.h"
#include "pvnet/lab/child.h"
#include "pvnet/lab/netns_bed.h"
#include "pvnet/lab/tool_output.h"

namespace pvnet::bench {
namespace {

using std::chrono::milliseconds;

constexpr uint16_t kServerPort = 7403;

/// Context switches since boot, every CPU (/proc/stat "ctxt").
Result<uint64_t, std::string> ctxt_switches() {
    std::ifstream in("/proc/stat");
    std::string key;
    uint64_t v = 0;
    while (in >> key) {
        if (key == "ctxt" && (in >> v)) return v;
        in.ignore(1 << 20, '\n');
    }
    return unexpected(std::string("/proc/stat has no ctxt line"));
}

/// The client's JSON result (udp-rr client --json) into `res`.
Status<std::string> read_client(const std::string& path, XpsBenchResult& res, double window_s) {
    std::ifstream in(path);
    if (!in) return unexpected("no udp-rr client result in " + path);
    nlohmann::json j;
    try {
        in >> j;
        const nlohmann::json& r = j.at("result");
        res.offered_per_s = r.at("offered_per_s").get<double>();
        res.achieved_per_s = r.at("achieved_per_s").get<double>();
        res.rtt_min_us = r.at("lat_min_us").get<double>();
        res.rtt_avg_us = r.at("lat_avg_us").get<double>();
        res.rtt_max_us = r.at("lat_max_us").get<double>();
        res.p50_us = r.at("lat_p50_us").get<double>();
        res.p99_us = r.at("lat_p99_us").get<double>();
        res.sent = r.at("sent").get<uint64_t>();
        res.answered = r.at("received").get<uint64_t>();
        res.abandoned = r.at("abandoned").get<uint64_t>();
        res.backlog_end = r.at("backlog_end").get<uint64_t>();
        res.drop_bad_reply =
            r.at("rx_bad_size").get<uint64_t>() + r.at("rx_bad_magic").get<uint64_t>() +
            r.at("rx_bad_flow").get<uint64_t>() + r.at("rx_bad_seq").get<uint64_t>() +
            r.at("rx_bad_thread").get<uint64_t>();
    } catch (const nlohmann::json::exception& e) {
        return unexpected("udp-rr client result " + path + ": " + e.what());
    }
    res.window_s = window_s;
    return {};
}

/// "q3_": the relay's per-queue (q) or per-thread (t) key prefix. Appended
/// piecewise: g++ 12 warns falsely (-Wrestrict) on "q" + to_string(i).
std::string prefix(char kind, uint16_t i) {
    std::string p(1, kind);
    p += std::to_string(i);
    p += '_';
    return p;
}

/// The relay's counters of the run into `res`: interrupts, per queue and
/// per guest thread (the pick of each reply). Missing keys are an error.
Status<std::string> read_relay(const std::string& line, uint16_t pairs, XpsBenchResult& res) {
    std::string missing;
    const auto get = [&](const std::string& k) -> uint64_t {
        const auto v = lab::key_value(line, k);
        if (!v && missing.empty()) missing = k;
        return v.value_or(0);
    };
    res.interrupts_per_s = static_cast<double>(get("interrupts")) / res.window_s;
    uint64_t picked = 0, mismatch = 0;
    for (uint16_t i = 0; i < pairs; ++i) {
        const std::string q = prefix('q', i);
        XpsQueueResult qr;
        qr.rx_pkts = get(q + "h2g_frames");
        qr.tx_pkts = get(q + "g2h_frames");
        qr.rx_interrupts = get(q + "interrupts");
        res.queues.push_back(qr);
        // Guest thread i reads tap A queue i (the relay's layout).
        const std::string t = prefix('t', i);
        XpsThreadResult tr;
        for (uint16_t k = 0; k < pairs; ++k)
            tr.txq_used.push_back(get(t + "txq" + std::to_string(k)));
        tr.by_rule = {get(t + "xps_rxqs"), get(t + "xps_cpus"), get(t + "xps_hash")};
        tr.rxq_mismatch = get(t + "rxq_mismatch");
        picked += tr.by_rule[0] + tr.by_rule[1] + tr.by_rule[2];
        mismatch += tr.rxq_mismatch;
        res.threads.push_back(tr);
    }
    if (!missing.empty())
        return unexpected("the relay's final line has no " + missing + ": " + line);
    // Frames without a recorded rx queue (ARP) count as neither.
    res.same_queue_share =
        picked == 0 ? 0 : 1.0 - static_cast<double>(mismatch) / static_cast<double>(picked);
    res.drop_no_buf = get("ring_drops");
    return {};
}

}  // namespace

XpsBenchResult run_xps_relay_bench(const XpsBenchConfig& cfg, const std::string& pvnet_exe,
                                   const std::string& tag) noexcept {
    XpsBenchResult res;
    try {
        if (cfg.queue_pairs < 1 || cfg.threads < 1 || cfg.flows < 1 || cfg.rate == 0) {
            res.error = "queue pairs, threads, flows and rate must be positive";
            return res;
        }
        RelayVariant v{to_string(cfg.variant),
                       false,
                       {"--queues", std::to_string(cfg.queue_pairs), "--workers", "0",
                        "--queue-size", std::to_string(cfg.queue_size),
                        cfg.variant == XpsVariant::Symmetric ? "--symmetric" : "--xps"}};
        auto bed = RelayBed::create(v, pvnet_exe, tag);
        if (!bed) {
            res.error = bed.error();
            return res;
        }
        const std::string server_at =
            std::string(RelayBed::kIpA) + ":" + std::to_string(kServerPort);
        auto server = lab::Child::spawn(lab::in_netns(
            (*bed)->ns_a(),
            {pvnet_exe, "udp-rr", "server", "--bind", server_at, "--threads",
             std::to_string(cfg.threads), "--steer", cfg.pin_threads ? "incoming-cpu" : "hash"}));
        if (!server) {
            res.error = "udp-rr server: " + server.error();
            return res;
        }
        if (auto st = lab::wait_listening((*bed)->ns_a(), false, kServerPort); !st) {
            res.error = st.error() + " (udp-rr server: " + server->output_tail() + ")";
            return res;
        }
        const std::string json = "/tmp/pvnet-xps-relay-" + tag + ".json";
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.3f", cfg.seconds);
        // A slow warm-up run first (kWarmupRate for 0.2 s, a few requests per
        // flow): ARP, tun's flow tables and the relay's flow table filled, so
        // the measured window starts warm. The relay's counters include it,
        // a few hundred frames against the window's many thousands.
        constexpr uint32_t kWarmupRate = 2000;
        const auto client = [&](const char* duration, bool measured) {
            std::vector<std::string> argv = {pvnet_exe,
                                             "udp-rr",
                                             "client",
                                             "--server",
                                             server_at,
                                             "--flows",
                                             std::to_string(cfg.flows),
                                             "--rate",
                                             std::to_string(measured ? cfg.rate : kWarmupRate),
                                             "--duration",
                                             duration,
                                             "--size",
                                             std::to_string(cfg.frame_bytes),
                                             "--threads",
                                             "1",
                                             "--drain",
                                             "0.5"};
            if (measured) argv.insert(argv.end(), {"--json", json});
            return lab::run_ok(lab::in_netns((*bed)->ns_b(), argv),
                               milliseconds(static_cast<int64_t>(1000 * (cfg.seconds + 30))));
        };
        if (auto w = client("0.2", false); !w) {
            res.error = "warm-up: " + w.error();
            return res;
        }
        const pid_t relay_pid = (*bed)->relay_pid().value_or(-1);
        const auto relay0 = process_cpu_ns(relay_pid);
        const auto server0 = process_cpu_ns(server->pid());
        const auto ctxt0 = ctxt_switches();
        const auto ran = client(secs, true);
        const auto relay1 = process_cpu_ns(relay_pid);
        const auto server1 = process_cpu_ns(server->pid());
        const auto ctxt1 = ctxt_switches();
        server->stop();
        const std::string relay_out = (*bed)->stop_relay();
        if (!ran) {
            res.error = "udp-rr client: " + ran.error();
            return res;
        }
        for (const auto* r : {&relay0, &relay1, &server0, &server1}) {
            if (!*r) {
                res.error = r->error();
                return res;
            }
        }
        if (!ctxt0 || !ctxt1) {
            res.error = !ctxt0 ? ctxt0.error() : ctxt1.error();
            return res;
        }
        auto st = read_client(json, res, cfg.seconds);
        ::unlink(json.c_str());
        if (!st) {
            res.error = st.error();
            return res;
        }
        const auto line = lab::counters_line(relay_out, "final");
        if (!line) {
            res.error = "the relay printed no final line: " + relay_out;
            return res;
        }
        if (auto rs = read_relay(*line, cfg.queue_pairs, res); !rs) {
            res.error = rs.error();
            return res;
        }
        res.ctx_switches_per_s = static_cast<double>(*ctxt1 - *ctxt0) / cfg.seconds;
        const double cpu_ns = static_cast<double>((*relay1 - *relay0) + (*server1 - *server0));
        if (res.answered != 0) {
            res.cycles_per_req = cpu_ns * tsc_per_ns() / static_cast<double>(res.answered);
        }
        res.ok = true;
    } catch (const std::exception& e) {
        res.error = e.what();
    }
    return res;
}

}  // namespace pvnet::bench
