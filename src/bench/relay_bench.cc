// The relay experiment's testbed and tool runners: namespaces and links with
// `ip`, the relay and the tools as lab::Child processes, their output parsed
// by the lab's parsers.
#include "pvnet/bench/relay_bench.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <sstream>
#include <tuple>

#include "pvnet/bench/pvp.h"

namespace pvnet::bench {

using std::chrono::milliseconds;

namespace {

/// Parses a whole decimal number (a trailing newline allowed); false unless all of `s` is one.
bool parse_u64(std::string_view s, uint64_t& v) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

// ---------------------------------------------------------------- variants

Result<RelayVariant, std::string> relay_variant(std::string_view name) {
    RelayVariant v;
    v.name = std::string(name);
    if (name == "veth") {
        v.veth = true;
        return v;
    }
    if (name == "plain") {
        v.relay_args = {"--plain"};
        return v;
    }
    if (name == "plain-nooff") {
        v.relay_args = {"--plain", "--offloads", "off"};
        return v;
    }
    const auto unknown = [&] {
        return unexpected("unknown variant '" + v.name +
                          "': veth, plain, plain-nooff, or "
                          "napi[+at-rx][+direct[+spin]][+coalesce][+vu] "
                          "(parts in this order)");
    };
    constexpr std::string_view kParts[] = {"at-rx", "direct", "spin", "coalesce", "vu"};
    bool has[std::size(kParts)] = {};
    if (name.substr(0, 4) != "napi") return unknown();
    std::string_view rest = name.substr(4);
    std::size_t next = 0;  // parts must come in kParts order, each once
    while (!rest.empty()) {
        if (rest[0] != '+') return unknown();
        rest.remove_prefix(1);
        const std::string_view part = rest.substr(0, rest.find('+'));
        rest.remove_prefix(part.size());
        std::size_t i = next;
        while (i < std::size(kParts) && kParts[i] != part) ++i;
        if (i == std::size(kParts)) return unknown();
        has[i] = true;
        next = i + 1;
    }
    const bool at_rx = has[0], direct = has[1], spin = has[2], coalesce = has[3];
    if (spin && !direct) return unexpected("variant '" + v.name + "': +spin needs +direct");
    v.two_process = has[4];
    if (v.two_process && (direct || coalesce)) {
        // Both are the backend's, in the other process.
        return unexpected("variant '" + v.name + "': +vu takes neither +direct nor +coalesce");
    }
    // Every mechanism explicit, on or off, so the label is the whole story.
    v.relay_args = {"--tx-mode", "napi"};
    if (at_rx) v.relay_args.push_back("--at-rx");  // off by default: the relay has no --no-at-rx
    if (!v.two_process) v.relay_args.push_back(direct ? "--direct" : "--no-direct");
    if (spin) v.relay_args.insert(v.relay_args.end(), {"--direct-spin-usecs", "50"});
    if (coalesce) v.relay_args.insert(v.relay_args.end(), {"--tx-frames", "64", "--tx-usecs", "64"});
    return v;
}

// ---------------------------------------------------------------- RelayBed

Result<std::unique_ptr<RelayBed>, std::string> RelayBed::create(const RelayVariant& variant,
                                                                const std::string& pvnet_exe,
                                                                const std::string& tag) {
    std::unique_ptr<RelayBed> bed(new RelayBed());
    auto netns = lab::NetnsBed::create(kRelayNetnsPrefix, tag);
    if (!netns) return unexpected(netns.error());
    bed->netns_.emplace(std::move(*netns));
    if (variant.veth) {
        bed->if_a_ = "pvv-a";
        bed->if_b_ = "pvv-b";
        if (auto st = lab::ip({"link", "add", bed->if_a_, "netns", bed->ns_a(), "type", "veth",
                               "peer", "name", bed->if_b_, "netns", bed->ns_b()});
            !st) {
            return unexpected(st.error());
        }
    } else {
        bed->if_a_ = "pvt-a";
        bed->if_b_ = "pvt-b";
        bed->relay_argv_ = {pvnet_exe, "relay", "--guest-tap", bed->if_a_, "--guest-netns",
                            bed->ns_a(), "--stats-interval", "0"};
        if (variant.two_process) {
            const std::string sock = "/tmp/pvnet-relay-" + tag + ".sock";
            auto be = lab::Child::spawn({pvnet_exe, "serve", "--vhost-user", sock, "--tap",
                                         bed->if_b_, "--netns", bed->ns_b()});
            if (!be) return unexpected(be.error());
            bed->backend_.emplace(std::move(*be));
            if (!bed->backend_->wait_for_line("ready", std::chrono::seconds(10))) {
                bed->backend_->stop();
                return unexpected("pvnet serve not ready: " + bed->backend_->output_tail(2000));
            }
            bed->relay_argv_.insert(bed->relay_argv_.end(), {"--vhost-user", sock});
        } else {
            bed->relay_argv_.insert(bed->relay_argv_.end(),
                                    {"--host-tap", bed->if_b_, "--host-netns", bed->ns_b()});
        }
        bed->relay_argv_.insert(bed->relay_argv_.end(), variant.relay_args.begin(),
                                variant.relay_args.end());
        // stdin: the relay's run-time commands (relay_command).
        auto child = lab::Child::spawn(bed->relay_argv_, lab::SpawnOptions{.stdin_socket = true});
        if (!child) return unexpected(child.error());
        bed->relay_.emplace(std::move(*child));
        if (!bed->relay_->wait_for_line("ready", std::chrono::seconds(10))) {
            bed->relay_->stop();
            std::string out = bed->relay_->output();
            while (!out.empty() && out.back() == '\n') out.pop_back();
            return unexpected("relay not ready: " + (out.empty() ? "no output" : out));
        }
    }
    for (auto [ns, ifname, ip] : {std::tuple{bed->ns_a(), bed->if_a_, kIpA},
                                  std::tuple{bed->ns_b(), bed->if_b_, kIpB}}) {
        if (auto st = lab::ip({"-n", ns, "addr", "add", std::string(ip) + "/24", "dev", ifname}); !st) {
            return unexpected(st.error());
        }
        if (auto st = lab::ip({"-n", ns, "link", "set", ifname, "up"}); !st) {
            return unexpected(st.error());
        }
    }
    // Reachable before anything is measured (links come up asynchronously).
    std::string last;
    for (int i = 0; i < 10 && !lab::abort_requested(); ++i) {
        auto r = lab::run_ok(lab::in_netns(bed->ns_a(), {"ping", "-q", "-c", "1", "-W", "1", kIpB}),
                             milliseconds(3000));
        if (r) return bed;
        last = r.error();
    }
    return unexpected("no ping through " + variant.name + ": " + last);
}

RelayBed::~RelayBed() { stop_relay(); }

std::optional<pid_t> RelayBed::relay_pid() const noexcept {
    if (!relay_ || relay_->pid() < 0) return std::nullopt;
    return relay_->pid();
}

std::optional<pid_t> RelayBed::backend_pid() const noexcept {
    if (!backend_ || backend_->pid() < 0) return std::nullopt;
    return backend_->pid();
}

Result<uint64_t, std::string> RelayBed::cpu_ns() const {
    uint64_t sum = 0;
    for (const auto pid : {relay_pid(), backend_pid()}) {
        if (!pid) continue;
        auto c = process_cpu_ns(*pid);
        if (!c) return unexpected(c.error());
        sum += *c;
    }
    return sum;
}

std::string RelayBed::stop_relay() {
    if (!relay_) return {};
    relay_->stop();
    if (backend_) backend_->stop();
    return relay_->output();
}

Result<std::string, std::string> RelayBed::relay_command(const std::string& line) {
    if (!relay_) return unexpected(std::string("no relay (veth)"));
    const std::size_t from = relay_->output().size();
    if (!relay_->send_line(line)) return unexpected("cannot write to the relay: " + line);
    const std::string head = line + ": ";
    auto reply = relay_->wait_for_line_if(
        [&head](std::string_view l) { return l.substr(0, head.size()) == head; },
        std::chrono::seconds(5), from);
    if (!reply) return unexpected("no reply from the relay to " + line);
    return *reply;
}

// ---------------------------------------------------------------- counters

Result<uint64_t, std::string> process_cpu_ns(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return unexpected("cannot read " + dir + ": " + std::strerror(errno));
    uint64_t total = 0;
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::FILE* f = std::fopen((dir + "/" + e->d_name + "/schedstat").c_str(), "r");
        if (f == nullptr) continue;  // the thread exited meanwhile
        unsigned long long ns = 0;
        if (std::fscanf(f, "%llu", &ns) == 1) total += ns;
        std::fclose(f);
    }
    ::closedir(d);
    return total;
}

Result<IfCounters, std::string> if_counters(const std::string& netns, const std::string& ifname) {
    const std::string base = "/sys/class/net/" + ifname + "/statistics/";
    auto out = lab::run_ok(lab::in_netns(netns, {"cat", base + "rx_bytes", base + "rx_packets"}),
                           milliseconds(5000));
    if (!out) return unexpected(out.error());
    std::istringstream in(*out);
    std::string b, p;
    IfCounters c;
    if (!std::getline(in, b) || !std::getline(in, p) || !parse_u64(b, c.rx_bytes) ||
        !parse_u64(p, c.rx_packets)) {
        return unexpected("unexpected interface counters for " + ifname + ": " + *out);
    }
    return c;
}

// ---------------------------------------------------------------- tools

Result<IperfResult, std::string> run_iperf3(RelayBed& bed, uint16_t flows, double seconds,
                                            uint64_t bytes) {
    constexpr uint16_t kPort = 5201;
    if (flows == 0 || flows > 128) return unexpected(std::string("iperf3 takes 1..128 streams"));
    // -i 0: no per-second lines; the server's output is read only at its end.
    auto server = lab::Child::spawn(lab::in_netns(
        bed.ns_b(), {"iperf3", "-s", "-1", "-i", "0", "-B", RelayBed::kIpB, "-p", std::to_string(kPort)}));
    if (!server) return unexpected(server.error());
    if (auto st = lab::wait_listening(bed.ns_b(), true, kPort); !st) {
        return unexpected(st.error() + " (iperf3 -s: " + server->output() + ")");
    }
    std::vector<std::string> cmd = {"iperf3", "-c", RelayBed::kIpB, "-p", std::to_string(kPort),
                                    "-J", "-i", "0", "-P", std::to_string(flows),
                                    "--connect-timeout", "5000"};
    if (bytes != 0) {
        cmd.insert(cmd.end(), {"-n", std::to_string(bytes)});
    } else {
        char t[32];
        std::snprintf(t, sizeof t, "%.3f", seconds);
        cmd.insert(cmd.end(), {"-t", t});
    }
    auto before = if_counters(bed.ns_b(), bed.if_b());
    if (!before) return unexpected(before.error());
    const auto pid = bed.relay_pid();
    auto c0 = bed.cpu_ns();
    if (!c0) return unexpected(c0.error());
    const uint64_t cpu0 = *c0;
    // -n runs as long as the path needs: bounded at 1 s per 100 MB plus setup.
    const auto timeout = milliseconds(static_cast<int64_t>(
        1000 * (bytes != 0 ? 20.0 + static_cast<double>(bytes) / 1e8 : seconds + 30)));
    auto out = lab::run(lab::in_netns(bed.ns_a(), cmd), timeout);
    auto c1 = bed.cpu_ns();
    if (!c1) return unexpected(c1.error());
    const uint64_t cpu1 = *c1;
    auto after = if_counters(bed.ns_b(), bed.if_b());
    server->finish(milliseconds(5000));
    if (!out) return unexpected(out.error());
    // iperf3 -J reports its own failures in the JSON (and exits 1): the parser returns that text.
    auto rep = lab::parse_iperf3_json(out->output);
    if (!rep) return unexpected(rep.error() + " (iperf3 " + out->exit.to_string() + ")");
    if (!out->exit.ok()) return unexpected("iperf3 " + out->exit.to_string() + ": " + out->output);
    if (!after) return unexpected(after.error());
    IperfResult r;
    r.flows = flows;
    r.sent_bytes = rep->sent_bytes;
    r.received_bytes = rep->received_bytes;
    r.retransmits = rep->retransmits;
    r.gbps = rep->received_bps / 1e9;
    const uint64_t pkts = after->rx_packets - before->rx_packets;
    if (pkts != 0) {
        r.bytes_per_pkt = static_cast<double>(after->rx_bytes - before->rx_bytes) / static_cast<double>(pkts);
    }
    if (pid) {
        r.cpu_ns = static_cast<double>(cpu1 - cpu0);
        if (r.received_bytes != 0) {
            r.cycles_per_byte = r.cpu_ns * tsc_per_ns() / static_cast<double>(r.received_bytes);
        }
    }
    return r;
}

Result<lab::SockperfReport, std::string> run_sockperf(RelayBed& bed, bool tcp, double seconds) {
    constexpr uint16_t kPort = 11111;
    std::vector<std::string> srv = {"sockperf", "server", "-i", RelayBed::kIpB, "-p",
                                    std::to_string(kPort)};
    if (tcp) srv.push_back("--tcp");
    auto server = lab::Child::spawn(lab::in_netns(bed.ns_b(), srv));
    if (!server) return unexpected(server.error());
    if (auto st = lab::wait_listening(bed.ns_b(), tcp, kPort); !st) {
        return unexpected(st.error() + " (sockperf server: " + server->output() + ")");
    }
    const auto secs = std::to_string(std::max(1, static_cast<int>(seconds + 0.5)));
    std::vector<std::string> cli = {"sockperf", "ping-pong", "-i", RelayBed::kIpB, "-p",
                                    std::to_string(kPort), "-m", "64", "-t", secs, "--full-rtt"};
    if (tcp) cli.push_back("--tcp");
    auto out = lab::run_ok(lab::in_netns(bed.ns_a(), cli),
                           milliseconds(static_cast<int64_t>(1000 * (seconds + 20))));
    server->stop();
    if (!out) return unexpected(out.error());
    return lab::parse_sockperf(*out);
}

Result<lab::PingReport, std::string> run_ping(RelayBed& bed, PingFrom from, uint32_t count,
                                              double interval_s) {
    char iv[32];
    std::snprintf(iv, sizeof iv, "%.3f", interval_s);
    // -w: the whole run's deadline, twice its nominal length plus slack.
    const double deadline_s = 2 * count * interval_s + 5;
    const bool a = from == PingFrom::A;
    auto out = lab::run(lab::in_netns(a ? bed.ns_a() : bed.ns_b(),
                                      {"ping", "-q", "-i", iv, "-c", std::to_string(count), "-w",
                                       std::to_string(static_cast<int>(deadline_s)),
                                       a ? RelayBed::kIpB : RelayBed::kIpA}),
                        milliseconds(static_cast<int64_t>(1000 * (deadline_s + 5))));
    if (!out) return unexpected(out.error());
    // ping exits 1 when replies were missing: a loss figure, not a failure.
    if (out->exit.code != 0 && out->exit.code != 1) {
        return unexpected("ping " + out->exit.to_string() + ": " + out->output);
    }
    return lab::parse_ping(out->output);
}

}  // namespace pvnet::bench
