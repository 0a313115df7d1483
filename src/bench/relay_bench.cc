// The relay experiment's testbed and tool runners: namespaces and links with
// `ip`, the relay and the tools as child processes, their output parsed.
#include "pvnet/bench/relay_bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "pvnet/bench/pvp.h"

extern char** environ;

namespace pvnet::bench {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {
std::atomic<bool> g_abort{false};
}  // namespace

void request_abort() noexcept { g_abort.store(true, std::memory_order_relaxed); }
bool abort_requested() noexcept { return g_abort.load(std::memory_order_relaxed); }

// ---------------------------------------------------------------- Child

Result<Child, std::string> Child::spawn(const std::vector<std::string>& argv) {
    if (argv.empty()) return unexpected(std::string("spawn: no command"));
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return unexpected(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    // The child starts with no blocked signals and default SIGINT/SIGTERM,
    // whatever its parent (a relay, a test) set for itself.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, stop_sigs;
    sigemptyset(&none);
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &stop_sigs);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(p[1]);
    if (rc != 0) {
        ::close(p[0]);
        return unexpected("cannot run " + argv[0] + ": " + std::strerror(rc));
    }
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    return Child(pid, p[0]);
}

Child::Child(Child&& o) noexcept
    : pid_(o.pid_), fd_(o.fd_), status_(o.status_), out_(std::move(o.out_)) {
    o.pid_ = -1;
    o.fd_ = -1;
}

Child::~Child() {
    stop();
    if (fd_ >= 0) ::close(fd_);
}

bool Child::drain(milliseconds wait) {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return true;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n > 0) {
            out_.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
        ::close(fd_);  // EOF (every writer gone) or a broken pipe
        fd_ = -1;
        return false;
    }
}

bool Child::reaped(int& status) {
    if (pid_ < 0) {
        status = status_;
        return true;
    }
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == 0) return false;
    // r < 0: not our child any more (cannot happen for a pid we spawned): treat as gone.
    status_ = r > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    pid_ = -1;
    status = status_;
    return true;
}

bool Child::wait_for_line(std::string_view line, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::size_t scanned = 0;
    for (;;) {
        // Whole lines only: a line is matched once its newline arrived.
        for (std::size_t nl; (nl = out_.find('\n', scanned)) != std::string::npos; scanned = nl + 1) {
            if (std::string_view(out_).substr(scanned, nl - scanned) == line) return true;
        }
        if (Clock::now() >= deadline || abort_requested()) return false;
        if (!drain(milliseconds(10))) {
            // EOF: the last unterminated piece cannot be the line we wait for.
            return false;
        }
    }
}

int Child::finish(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    int status = -1;
    while (!reaped(status)) {
        if (Clock::now() >= deadline || abort_requested()) return stop(milliseconds(0));
        drain(milliseconds(10));
    }
    while (drain(milliseconds(0)) && fd_ >= 0) {
        // The child is gone; a grandchild holding the pipe must not keep us here.
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) break;
    }
    return status;
}

int Child::stop(milliseconds grace) {
    int status = -1;
    if (reaped(status)) return status;
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + grace;
    while (!reaped(status)) {
        if (Clock::now() >= deadline) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
            }
            pid_ = -1;
            status_ = -1;
            break;
        }
        drain(milliseconds(10));
    }
    drain(milliseconds(0));
    return status_;
}

// ---------------------------------------------------------------- helpers

namespace {

/// Runs a command to its end (bounded) and returns its output if it exited 0.
Result<std::string, std::string> run_capture(const std::vector<std::string>& argv,
                                             milliseconds timeout) {
    auto c = Child::spawn(argv);
    if (!c) return unexpected(c.error());
    const int st = c->finish(timeout);
    if (st != 0) {
        std::string cmd;
        for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
        return unexpected(cmd + " failed (status " + std::to_string(st) + "): " + c->output());
    }
    return c->output();
}

std::vector<std::string> in_netns(const std::string& ns, std::vector<std::string> cmd) {
    cmd.insert(cmd.begin(), {"ip", "netns", "exec", ns});
    return cmd;
}

Status<std::string> ip_ok(std::vector<std::string> args) {
    args.insert(args.begin(), "ip");
    auto r = run_capture(args, milliseconds(10'000));
    if (!r) return unexpected(r.error());
    return {};
}

/// A listening socket on `port` in `ns` (ss), polled for up to 5 s.
Status<std::string> wait_listening(const std::string& ns, bool tcp, uint16_t port) {
    // Appended, not ":" + to_string(): g++ 12 -O3 warns falsely (-Wrestrict) on that.
    std::string sport = ":";
    sport += std::to_string(port);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < deadline) {
        auto out = run_capture(in_netns(ns, {"ss", tcp ? "-Hltn" : "-Hlun", "sport", "=", sport}),
                               milliseconds(5000));
        if (out && out->find(std::to_string(port)) != std::string::npos) return {};
        std::this_thread::sleep_for(milliseconds(20));
    }
    return unexpected("nothing listens on port " + std::to_string(port) + " in " + ns);
}

/// Parses a whole decimal number; false unless all of `s` is one.
bool parse_u64(std::string_view s, uint64_t& v) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    if (s.empty() || s.size() > 20) return false;
    v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        const uint64_t d = static_cast<uint64_t>(c - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    return true;
}

/// The number after `key` on the first line containing it ("key  12.5").
std::optional<double> number_after(const std::string& text, std::string_view key) {
    const std::size_t at = text.find(key);
    if (at == std::string::npos) return std::nullopt;
    const char* p = text.c_str() + at + key.size();
    char* end = nullptr;
    const double v = std::strtod(p, &end);
    if (end == p) return std::nullopt;
    return v;
}

}  // namespace

// ---------------------------------------------------------------- variants

Result<RelayVariant, std::string> relay_variant(std::string_view name) {
    RelayVariant v;
    v.name = std::string(name);
    const std::vector<std::string> napi = {"--tx-mode", "napi", "--no-direct"};
    if (name == "veth") {
        v.veth = true;
    } else if (name == "plain") {
        v.relay_args = {"--plain"};
    } else if (name == "plain-nooff") {
        v.relay_args = {"--plain", "--offloads", "off"};
    } else if (name == "napi") {
        v.relay_args = napi;
    } else if (name == "napi+at-rx") {
        v.relay_args = napi;
        v.relay_args.push_back("--at-rx");
    } else if (name == "napi+coalesce") {
        v.relay_args = napi;
        v.relay_args.insert(v.relay_args.end(), {"--tx-frames", "64", "--tx-usecs", "64"});
    } else if (name == "napi+direct") {
        v.relay_args = {"--tx-mode", "napi", "--at-rx", "--direct"};
    } else if (name == "napi+direct+spin") {
        v.relay_args = {"--tx-mode", "napi", "--at-rx", "--direct", "--direct-spin-usecs", "50"};
    } else {
        return unexpected("unknown variant '" + v.name +
                          "' (veth, plain, plain-nooff, napi, napi+at-rx, napi+coalesce, "
                          "napi+direct, napi+direct+spin)");
    }
    return v;
}

// ---------------------------------------------------------------- RelayBed

Result<std::unique_ptr<RelayBed>, std::string> RelayBed::create(const RelayVariant& variant,
                                                                const std::string& pvnet_exe,
                                                                const std::string& tag) {
    std::unique_ptr<RelayBed> bed(new RelayBed());
    for (auto [suffix, slot] : {std::pair{"a", &bed->ns_a_}, std::pair{"b", &bed->ns_b_}}) {
        auto ns = port::ScopedNetns::create("pvnet-relay-" + tag + "-" + suffix);
        if (!ns) return unexpected("creating a namespace: " + port::to_string(ns.error()));
        slot->emplace(std::move(*ns));
        // No IPv6 chatter (router solicitations, MLD) in the counters;
        // /proc/sys/net is the namespace of the thread that opens it.
        auto v6 = port::run_in_netns((*slot)->name(), []() -> Status<port::SysError> {
            for (const char* p : {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
                                  "/proc/sys/net/ipv6/conf/default/disable_ipv6"}) {
                std::FILE* f = std::fopen(p, "w");
                if (f == nullptr) return unexpected(port::SysError{"disable_ipv6", errno});
                std::fputs("1", f);
                std::fclose(f);
            }
            return {};
        });
        if (!v6) return unexpected("in " + (*slot)->name() + ": " + port::to_string(v6.error()));
        if (auto st = ip_ok({"-n", (*slot)->name(), "link", "set", "lo", "up"}); !st) {
            return unexpected(st.error());
        }
    }
    if (variant.veth) {
        bed->if_a_ = "pvv-a";
        bed->if_b_ = "pvv-b";
        if (auto st = ip_ok({"link", "add", bed->if_a_, "netns", bed->ns_a(), "type", "veth", "peer",
                             "name", bed->if_b_, "netns", bed->ns_b()});
            !st) {
            return unexpected(st.error());
        }
    } else {
        bed->if_a_ = "pvt-a";
        bed->if_b_ = "pvt-b";
        std::vector<std::string> argv = {pvnet_exe,     "relay",      "--guest-tap",     bed->if_a_,
                                         "--host-tap",  bed->if_b_,   "--guest-netns",   bed->ns_a(),
                                         "--host-netns", bed->ns_b(), "--stats-interval", "0"};
        argv.insert(argv.end(), variant.relay_args.begin(), variant.relay_args.end());
        auto child = Child::spawn(argv);
        if (!child) return unexpected(child.error());
        bed->relay_.emplace(std::move(*child));
        if (!bed->relay_->wait_for_line("ready", std::chrono::seconds(10))) {
            bed->relay_->stop();
            std::string out = bed->relay_->output();
            while (!out.empty() && out.back() == '\n') out.pop_back();
            return unexpected("relay not ready: " + (out.empty() ? "no output" : out));
        }
    }
    for (auto [ns, ifname, ip] : {std::tuple{&bed->ns_a_, &bed->if_a_, kIpA},
                                  std::tuple{&bed->ns_b_, &bed->if_b_, kIpB}}) {
        if (auto st = ip_ok({"-n", (*ns)->name(), "addr", "add", std::string(ip) + "/24", "dev", *ifname});
            !st) {
            return unexpected(st.error());
        }
        if (auto st = ip_ok({"-n", (*ns)->name(), "link", "set", *ifname, "up"}); !st) {
            return unexpected(st.error());
        }
    }
    // Reachable before anything is measured (links come up asynchronously).
    std::string last;
    for (int i = 0; i < 10; ++i) {
        auto r = run_capture(in_netns(bed->ns_a(), {"ping", "-q", "-c", "1", "-W", "1", kIpB}),
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

std::string RelayBed::stop_relay() {
    if (!relay_) return {};
    relay_->stop();
    return relay_->output();
}

void remove_stale_netns() {
    constexpr std::string_view kPrefix = "pvnet-relay-";
    DIR* d = ::opendir("/var/run/netns");
    if (d == nullptr) return;  // no namespaces at all
    std::vector<std::string> stale;
    while (const dirent* e = ::readdir(d)) {
        std::string_view name = e->d_name;
        if (name.substr(0, kPrefix.size()) != kPrefix) continue;
        name.remove_prefix(kPrefix.size());
        if (!name.empty() && name[0] >= 'a' && name[0] <= 'z') name.remove_prefix(1);
        uint64_t pid = 0;
        if (!parse_u64(name.substr(0, name.find('-')), pid) || pid == 0 || pid > INT32_MAX) continue;
        if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.emplace_back(e->d_name);
    }
    ::closedir(d);
    for (const auto& n : stale) (void)port::run_ip({"netns", "del", n});
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
    auto out = run_capture(in_netns(netns, {"cat", base + "rx_bytes", base + "rx_packets"}),
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
    // -i 0: no per-second lines; with 100 streams they would fill the pipe
    // we do not read while the client runs, and stall the server.
    auto server = Child::spawn(in_netns(bed.ns_b(), {"iperf3", "-s", "-1", "-i", "0", "-B",
                                                     RelayBed::kIpB, "-p", std::to_string(kPort)}));
    if (!server) return unexpected(server.error());
    if (auto st = wait_listening(bed.ns_b(), true, kPort); !st) {
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
    uint64_t cpu0 = 0;
    if (pid) {
        auto c = process_cpu_ns(*pid);
        if (!c) return unexpected(c.error());
        cpu0 = *c;
    }
    // -n runs as long as the path needs: bounded at 1 s per 100 MB plus setup.
    const auto timeout = milliseconds(static_cast<int64_t>(
        1000 * (bytes != 0 ? 20.0 + static_cast<double>(bytes) / 1e8 : seconds + 30)));
    auto out = run_capture(in_netns(bed.ns_a(), cmd), timeout);
    uint64_t cpu1 = cpu0;
    if (pid) {
        auto c = process_cpu_ns(*pid);
        if (!c) return unexpected(c.error());
        cpu1 = *c;
    }
    auto after = if_counters(bed.ns_b(), bed.if_b());
    server->finish(milliseconds(5000));
    // iperf3 -J reports its own failures in the JSON (and exits 1): prefer that text.
    const std::string& text = out ? *out : out.error();
    IperfResult r;
    r.flows = flows;
    try {
        const auto brace = text.find('{');
        if (brace == std::string::npos) return unexpected("iperf3 gave no JSON: " + text);
        const auto j = nlohmann::json::parse(text.substr(brace));
        if (j.contains("error")) return unexpected("iperf3: " + j["error"].get<std::string>());
        if (!out) return unexpected(out.error());
        const auto& sent = j.at("end").at("sum_sent");
        const auto& recv = j.at("end").at("sum_received");
        r.sent_bytes = sent.at("bytes").get<uint64_t>();
        r.received_bytes = recv.at("bytes").get<uint64_t>();
        r.retransmits = sent.value("retransmits", uint64_t{0});
        r.gbps = recv.at("bits_per_second").get<double>() / 1e9;
    } catch (const nlohmann::json::exception& e) {
        return unexpected(std::string("unexpected iperf3 JSON: ") + e.what());
    }
    if (!after) return unexpected(after.error());
    const uint64_t pkts = after->rx_packets - before->rx_packets;
    if (pkts != 0) r.bytes_per_pkt = static_cast<double>(after->rx_bytes - before->rx_bytes) / static_cast<double>(pkts);
    if (pid) {
        r.cpu_ns = static_cast<double>(cpu1 - cpu0);
        if (r.received_bytes != 0) {
            r.cycles_per_byte = r.cpu_ns * tsc_per_ns() / static_cast<double>(r.received_bytes);
        }
    }
    return r;
}

Result<SockperfResult, std::string> run_sockperf(RelayBed& bed, bool tcp, double seconds) {
    constexpr uint16_t kPort = 11111;
    std::vector<std::string> srv = {"sockperf", "server", "-i", RelayBed::kIpB, "-p",
                                    std::to_string(kPort)};
    if (tcp) srv.push_back("--tcp");
    auto server = Child::spawn(in_netns(bed.ns_b(), srv));
    if (!server) return unexpected(server.error());
    if (auto st = wait_listening(bed.ns_b(), tcp, kPort); !st) {
        return unexpected(st.error() + " (sockperf server: " + server->output() + ")");
    }
    const auto secs = std::to_string(std::max(1, static_cast<int>(seconds + 0.5)));
    std::vector<std::string> cli = {"sockperf", "ping-pong", "-i", RelayBed::kIpB, "-p",
                                    std::to_string(kPort), "-m", "64", "-t", secs, "--full-rtt"};
    if (tcp) cli.push_back("--tcp");
    auto out = run_capture(in_netns(bed.ns_a(), cli),
                           milliseconds(static_cast<int64_t>(1000 * (seconds + 20))));
    server->stop();
    if (!out) return unexpected(out.error());
    SockperfResult r;
    const auto p50 = number_after(*out, "percentile 50.000 =");
    const auto p99 = number_after(*out, "percentile 99.000 =");
    const auto p999 = number_after(*out, "percentile 99.900 =");
    const auto avg = number_after(*out, "avg-rtt=");
    const auto n = number_after(*out, "ReceivedMessages=");
    if (!p50 || !p99 || !p999) return unexpected("unexpected sockperf output: " + *out);
    r.p50_us = *p50;
    r.p99_us = *p99;
    r.p999_us = *p999;
    r.avg_us = avg.value_or(0);
    r.observations = n && *n > 0 ? static_cast<uint64_t>(*n) : 0;
    return r;
}

Result<PingResult, std::string> run_ping(RelayBed& bed, uint32_t count, double interval_s) {
    char iv[32];
    std::snprintf(iv, sizeof iv, "%.3f", interval_s);
    // -w: the whole run's deadline, twice its nominal length plus slack.
    const double deadline_s = 2 * count * interval_s + 5;
    auto out = run_capture(in_netns(bed.ns_a(), {"ping", "-q", "-i", iv, "-c", std::to_string(count),
                                                 "-w", std::to_string(static_cast<int>(deadline_s)),
                                                 RelayBed::kIpB}),
                           milliseconds(static_cast<int64_t>(1000 * (deadline_s + 5))));
    if (!out) return unexpected(out.error());
    PingResult r;
    const auto tx = number_after(*out, "statistics ---\n");
    const auto rx = number_after(*out, "transmitted, ");
    const std::size_t at = out->find("min/avg/max/mdev = ");
    if (!tx || !rx || at == std::string::npos ||
        std::sscanf(out->c_str() + at, "min/avg/max/mdev = %lf/%lf/%lf/%lf", &r.min_ms, &r.avg_ms,
                    &r.max_ms, &r.mdev_ms) != 4) {
        return unexpected("unexpected ping output: " + *out);
    }
    r.transmitted = static_cast<uint32_t>(*tx);
    r.received = static_cast<uint32_t>(*rx);
    return r;
}

}  // namespace pvnet::bench
