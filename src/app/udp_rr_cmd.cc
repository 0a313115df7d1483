// `pvnet udp-rr server` and `pvnet udp-rr client`: the UDP request/response
// tool of issue 12 (bench/udp_rr.h) — reuseport server threads steered by
// SO_INCOMING_CPU or the hash, an open-loop client. Run each end in its
// namespace with `ip netns exec`.
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "app_commands.h"
#include "bench_meta.h"
#include "cli_checks.h"
#include "pvnet/bench/udp_rr.h"
#include "pvnet/util/clock.h"
#include "stop_signals.h"

namespace pvnet::app {
namespace {

// The options land in the bench's configs; only the endpoints and the
// steering word are parsed after the checks.
struct UdpRrServerOpts {
    std::string bind;
    std::string steer;
    double duration_s = 0;
    bench::UdpRrServerConfig cfg;
};

struct UdpRrClientOpts {
    std::string server;
    std::string json;
    bench::UdpRrClientConfig cfg;
};

/// One line per server thread and a total: key=value words from the
/// counters' name table.
void print_udp_rr_server_stats(const std::vector<bench::UdpRrServerThreadStats>& stats) {
    bench::UdpRrServerThreadStats total;
    for (const auto& s : stats) {
        std::printf("thread=%u cpu=%d", s.thread, s.cpu);
        s.for_each([](const char* name, uint64_t v) {
            std::printf(" %s=%llu", name, static_cast<unsigned long long>(v));
        });
        std::printf("\n");
        total += s;
    }
    std::printf("total");
    total.for_each([](const char* name, uint64_t v) {
        std::printf(" %s=%llu", name, static_cast<unsigned long long>(v));
    });
    std::printf("\n");
}

void run_udp_rr_server(const UdpRrServerOpts& o) {
    checks::Ipv4Endpoint at;
    checks::parse_ipv4_endpoint(o.bind, at);  // checked by the option
    bench::UdpRrServerConfig cfg = o.cfg;
    cfg.ip = at.ip;
    cfg.port = at.port;
    cfg.steer =
        o.steer == "incoming-cpu" ? bench::UdpRrSteer::IncomingCpu : bench::UdpRrSteer::Hash;
    const int sfd = block_stop_signals();  // before the threads, which inherit the mask
    auto srv = bench::UdpRrServer::start(cfg);
    if (!srv) {
        ::close(sfd);
        throw std::runtime_error("udp-rr server: " + srv.error());
    }
    std::printf("ready port=%u threads=%u steer=%s\n", (*srv)->port(), cfg.threads,
                bench::to_string(cfg.steer));
    std::fflush(stdout);
    const uint64_t end_ns =
        o.duration_s > 0 ? now_ns() + static_cast<uint64_t>(o.duration_s * 1e9) : UINT64_MAX;
    while (now_ns() < end_ns) {
        pollfd p{sfd, POLLIN, 0};
        if (::poll(&p, 1, 100) == 1) {
            signalfd_siginfo si;
            if (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) break;
        }
    }
    (*srv)->stop();
    ::close(sfd);
    print_udp_rr_server_stats((*srv)->stats());
}

std::string udp_rr_list(const std::vector<uint64_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i]) s += (s.empty() ? "" : ",") + std::to_string(i) + ":" + std::to_string(v[i]);
    }
    return s.empty() ? "-" : s;
}

void run_udp_rr_client(const UdpRrClientOpts& o) {
    checks::Ipv4Endpoint to;
    checks::parse_ipv4_endpoint(o.server, to);  // checked by the option
    bench::UdpRrClientConfig cfg = o.cfg;
    cfg.server_ip = to.ip;
    cfg.server_port = to.port;
    const bench::UdpRrClientResult r = bench::run_udp_rr_client(cfg);
    if (!r.ok) throw std::runtime_error("udp-rr client: " + r.error);

    std::printf("udp-rr %s: %u flows on %u threads, %llu requests/s for %g s, %u bytes\n",
                o.server.c_str(), cfg.flows, cfg.threads,
                static_cast<unsigned long long>(cfg.rate_per_s), cfg.duration_s, cfg.size_bytes);
    r.for_each_figure([](const char* name, double v) { std::printf("%s=%.1f ", name, v); });
    std::printf("\n");
    r.for_each_count([](const char* name, uint64_t v) {
        std::printf("%s=%llu ", name, static_cast<unsigned long long>(v));
    });
    std::printf("\nreplies_by_server_thread=%s\nreplies_by_server_cpu=%s\n",
                udp_rr_list(r.replies_by_server_thread).c_str(),
                udp_rr_list(r.replies_by_server_cpu).c_str());
    if (o.json.empty()) return;
    nlohmann::json j;
    j["meta"] = bench_meta();
    j["experiment"] = "udp-rr";
    j["config"] = {{"server", o.server},           {"flows", cfg.flows},
                   {"rate_per_s", cfg.rate_per_s}, {"duration_s", cfg.duration_s},
                   {"size_bytes", cfg.size_bytes}, {"threads", cfg.threads},
                   {"drain_s", cfg.drain_s}};
    j["latency_from"] = "planned send time (open loop, no coordinated omission)";
    nlohmann::json& res = j["result"];
    r.for_each_figure([&](const char* name, double v) { res[name] = v; });
    r.for_each_count([&](const char* name, uint64_t v) { res[name] = v; });
    res["replies_by_server_thread"] = r.replies_by_server_thread;
    res["replies_by_server_cpu"] = r.replies_by_server_cpu;
    std::ofstream out(o.json);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + o.json);
}

}  // namespace

void add_udp_rr_command(CLI::App& app) {
    using checks::Int;
    CLI::App* cmd = app.add_subcommand(
        "udp-rr",
        "UDP request/response over the host stack: reuseport server threads steered by "
        "SO_INCOMING_CPU or the hash, an open-loop client");
    cmd->require_subcommand(1);

    auto so = std::make_shared<UdpRrServerOpts>();
    CLI::App* srv = cmd->add_subcommand(
        "server",
        "T threads, one SO_REUSEPORT socket each; every request echoed at its size "
        "with the thread, its CPU and SO_INCOMING_CPU filled in");
    srv->add_option("--bind", so->bind, "address and port to serve")
        ->required()
        ->check(checks::Ipv4Port(true));
    srv->add_option("--threads", so->cfg.threads, "server threads (sockets)")
        ->check(Int(uint16_t{1}, bench::kUdpRrMaxThreads));
    srv->add_option("--steer", so->steer,
                    "incoming-cpu: thread i pinned to the i-th allowed CPU, its socket's "
                    "SO_INCOMING_CPU set to it; hash: the reuseport hash alone")
        ->required()
        ->check(checks::OneOf({"incoming-cpu", "hash"}));
    srv->add_option("--duration", so->duration_s, "seconds to serve (0: until SIGINT/SIGTERM)")
        ->check(checks::Real(0.0, 1e6, "0: until SIGINT/SIGTERM"));
    srv->callback([so] { run_udp_rr_server(*so); });

    auto co = std::make_shared<UdpRrClientOpts>();
    CLI::App* cli = cmd->add_subcommand(
        "client",
        "F flows (one connected socket each), open loop at --rate requests/s in total, "
        "round robin over the flows; latency from each request's planned time");
    cli->add_option("--server", co->server, "the server's address and port")
        ->required()
        ->check(checks::Ipv4Port(false));
    // One ephemeral source port (and fd) per flow.
    cli->add_option("--flows", co->cfg.flows, "flows")->check(Int(1u, 65535u));
    cli->add_option("--rate", co->cfg.rate_per_s, "total requests/s")
        ->required()
        ->check(Int(uint64_t{1}, uint64_t{100'000'000}));
    cli->add_option("--duration", co->cfg.duration_s, "seconds of sending")
        ->required()
        ->check(checks::Real(0.01, 3600.0));
    cli->add_option("--size", co->cfg.size_bytes, "request and reply size, UDP payload bytes")
        ->check(Int(bench::kUdpRrHdrBytes, bench::kUdpRrMaxBytes));
    cli->add_option("--threads", co->cfg.threads,
                    "client threads (the flows are dealt round robin)")
        ->check(Int(uint16_t{1}, uint16_t{256}));
    cli->add_option("--drain", co->cfg.drain_s,
                    "seconds to wait after the window for outstanding replies")
        ->check(checks::Real(0.0, 60.0));
    cli->add_option("--json", co->json, "write the result to this file")
        ->check(checks::OutputPath());
    cli->callback([co] { run_udp_rr_client(*co); });
}

}  // namespace pvnet::app
