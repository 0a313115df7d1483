// The testpmd PVP baseline: two dpdk-testpmd processes (lab::Child), each
// with a socketpair on stdin for commands and its stdout and stderr
// captured (kept drained; a "testpmd> " prompt after a command means the
// command ran — the prompt is written unbuffered, printf output is not).
// Rates come from the DPDK telemetry socket, read twice with
// CLOCK_MONOTONIC around each read. Hugepages are reserved for the run and
// given back after it (lab::HugepageReservation).
#include "pvnet/bench/testpmd.h"

#include <signal.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>
#include <vector>

#include "pvnet/lab/child.h"
#include "pvnet/lab/dpdk_telemetry.h"
#include "pvnet/lab/hugepages.h"

namespace pvnet::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kStartTimeout = std::chrono::seconds(20);  // EAL init, mbuf pool in hugepages
constexpr auto kCommandTimeout = std::chrono::seconds(5);
constexpr auto kLinkTimeout = std::chrono::seconds(10);
constexpr auto kQuitTimeout = std::chrono::seconds(5);
constexpr auto kTermTimeout = std::chrono::seconds(2);
// Each testpmd maps ~370 MiB (its default mbuf pool); 2 × that plus slack.
constexpr long kHugepagesNeeded = 512;
constexpr std::string_view kPrompt = "testpmd> ";
constexpr std::string_view kTag = "pvnet-tp-";  // file-prefix and socket names

// Hugepage files and the runtime directory of one EAL file-prefix.
void remove_prefix_files(const std::string& huge_dir, const std::string& prefix) {
    std::error_code ec;
    if (!huge_dir.empty()) {
        const std::string stem = prefix + "map_";
        for (fs::directory_iterator it(huge_dir, ec), end; !ec && it != end; it.increment(ec)) {
            if (it->path().filename().string().rfind(stem, 0) == 0) fs::remove(it->path(), ec);
        }
    }
    fs::remove_all(lab::dpdk_runtime_dir(prefix), ec);
}

// False for no such process and for a zombie not reaped yet.
bool process_running(pid_t pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return false;
    const auto close = line.rfind(") ");
    return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

// Leftovers of runs whose process died before cleaning up ("pvnet-tp-<pid>-…").
void remove_stale(const std::string& huge_dir, const std::string& workdir) {
    std::error_code ec;
    const std::string run_base = fs::path(lab::dpdk_runtime_dir("x")).parent_path().string();
    for (const std::string& dir : {huge_dir, run_base, workdir}) {
        if (dir.empty()) continue;
        std::vector<fs::path> dead;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
            const std::string name = it->path().filename().string();
            if (name.rfind(kTag, 0) != 0) continue;
            const long pid = std::strtol(name.c_str() + kTag.size(), nullptr, 10);
            if (pid > 0 && !process_running(static_cast<pid_t>(pid))) dead.push_back(it->path());
        }
        for (const auto& p : dead) fs::remove_all(p, ec);
    }
}

// ---- one testpmd child -----------------------------------------------------

struct Testpmd {
    std::string name;
    std::optional<lab::Child> child;
    bool interactive = true;   // false: a command backend, stopped by SIGTERM alone
    uint64_t prompts = 0;      // "testpmd> " seen so far
    std::size_t scanned = 0;   // output searched for prompts up to here

    void count_prompts() {
        const std::string& out = child->output();
        std::size_t pos = scanned;
        for (std::size_t at; (at = out.find(kPrompt, pos)) != std::string::npos;) {
            ++prompts;
            pos = at + kPrompt.size();
        }
        // A prompt cut by the end of what arrived is found next time.
        const std::size_t partial = out.size() - std::min(out.size(), kPrompt.size() - 1);
        scanned = std::max(pos, partial);
    }
    std::string describe_exit() const {
        return name + (interactive ? " testpmd " : " ") + child->exit_status().to_string();
    }
    std::string last_output() const { return child->output_tail(); }
};

bool pump(std::vector<Testpmd*> tps, Clock::time_point until, const std::function<bool()>& done) {
    std::vector<lab::Child*> kids;
    for (Testpmd* t : tps) kids.push_back(&*t->child);
    return lab::Child::pump(kids, until, [&] {
        for (Testpmd* t : tps) t->count_prompts();
        return done();
    });
}

void sleep_pumping(std::vector<Testpmd*> tps, double seconds) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(std::max(0.0, seconds)));
    pump(std::move(tps), until, [] { return false; });
}

// Waits for the next prompt (the child reached its command line, or ran a command).
bool wait_prompt(Testpmd& t, uint64_t seen, std::chrono::seconds timeout, std::string& err) {
    bool died = false;
    const bool ok = pump({&t}, Clock::now() + timeout, [&] {
        if (t.prompts > seen) return true;
        died = !t.child->running() && !t.child->output_open();  // ended, output drained
        return died;
    });
    if (ok && !died) return true;
    err = (died ? t.describe_exit()
                : t.name + " testpmd: no prompt within " + std::to_string(timeout.count()) + " s") +
          "; its output ends:\n" + t.last_output();
    return false;
}

bool command(Testpmd& t, const std::string& cmd, std::string& err) {
    const uint64_t seen = t.prompts;
    if (!t.child->send_line(cmd)) {
        err = t.name + " testpmd: cannot send '" + cmd + "'";
        return false;
    }
    return wait_prompt(t, seen, kCommandTimeout, err);
}

// quit on its command line (testpmd), then SIGTERM, then SIGKILL; each wait bounded.
void stop(Testpmd& t) {
    if (!t.child) return;
    if (t.interactive && t.child->running()) {
        t.child->send_line("stop");
        t.child->send_line("quit");
    }
    if (t.interactive) {
        t.child->close_stdin();  // EOF on its stdin also ends the command line
        pump({&t}, Clock::now() + kQuitTimeout, [&] { return !t.child->running(); });
    }
    t.child->stop(kTermTimeout);
}

struct Sample {
    double t_s = 0;         // CLOCK_MONOTONIC, middle of the query
    uint64_t opackets = 0;  // packets the port transmitted
};

std::optional<Sample> sample(lab::TelemetryClient& t) {
    const auto t0 = Clock::now();
    auto j = t.query("/ethdev/stats,0");
    const auto t1 = Clock::now();
    if (!j || !j->is_object() || !j->contains("opackets") || !(*j)["opackets"].is_number_unsigned())
        return std::nullopt;
    Sample s;
    s.t_s = std::chrono::duration<double>((t0 + (t1 - t0) / 2).time_since_epoch()).count();
    s.opackets = (*j)["opackets"].get<uint64_t>();
    return s;
}

double rate_mpps(const Sample& a, const Sample& b) {
    const double dt = b.t_s - a.t_s;
    return dt > 0 && b.opackets >= a.opackets ? static_cast<double>(b.opackets - a.opackets) / dt / 1e6 : 0;
}

// Everything one run owns; the destructor stops the children and removes
// files on every exit path, then (members go in reverse) the hugepages.
struct Run {
    std::optional<lab::HugepageReservation> huge;
    Testpmd vhost{"vhost", std::nullopt, true};
    Testpmd virtio{"virtio-user", std::nullopt, true};
    std::string huge_dir, sock, vh_prefix, vu_prefix;
    ~Run() {
        stop(virtio);  // the frontend first, as a guest shuts down before its host
        stop(vhost);
        std::error_code ec;
        if (!sock.empty()) fs::remove(sock, ec);
        if (!vu_prefix.empty()) remove_prefix_files(huge_dir, vu_prefix);
        if (!vh_prefix.empty()) remove_prefix_files(huge_dir, vh_prefix);
    }
};

// EAL options, then testpmd's own after "--". No huge_dir: --no-huge
// (memfd-backed, so vhost-user can still share it).
std::vector<std::string> testpmd_args(const std::string& exe, int cpu, const std::string& huge_dir,
                                      const std::string& prefix, const std::string& vdev,
                                      uint16_t qsize, const char* fwd,
                                      const std::vector<std::string>& extra = {},
                                      const std::vector<std::string>& eal_extra = {}) {
    const std::string c = std::to_string(cpu), q = std::to_string(qsize);
    std::vector<std::string> a{exe, "--lcores=0@" + c + ",1@" + c, "--no-pci"};
    a.insert(a.end(), eal_extra.begin(), eal_extra.end());
    if (huge_dir.empty()) {
        a.insert(a.end(), {"--no-huge", "-m", "256"});
    } else {
        a.insert(a.end(), {"--single-file-segments", "--huge-dir=" + huge_dir});
    }
    for (std::string s : {"--file-prefix=" + prefix, "--vdev=" + vdev, std::string("--"),
                          std::string("-i"), std::string("--nb-cores=1"), "--txd=" + q,
                          "--rxd=" + q, std::string("--forward-mode=") + fwd})
        a.push_back(std::move(s));
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

// "pvnet-tp-<pid>-<serial>": names this run's socket and file-prefixes.
std::string new_tag() {
    static std::atomic<unsigned> serial{0};
    return std::string(kTag) + std::to_string(::getpid()) + "-" +
           std::to_string(serial.fetch_add(1));
}

bool start(Testpmd& t, std::vector<std::string> argv, std::string& err) {
    auto c = lab::Child::spawn(argv, {.stdin_socket = true});
    if (!c) {
        err = t.name + " testpmd: " + c.error();
        return false;
    }
    t.child.emplace(std::move(*c));
    return wait_prompt(t, 0, kStartTimeout, err);
}

TestpmdResult run(const TestpmdConfig& cfg) {
    TestpmdResult res;
    const auto fail = [&res](std::string why) {
        res.error = std::move(why);
        return res;
    };
    auto exe = lab::find_executable(cfg.testpmd);
    if (!exe) return fail(exe.error() + " (Debian: dpdk-dev)");
    if (cfg.vhost_cpu < 0 || cfg.virtio_cpu < 0 || cfg.queue_size == 0 || !(cfg.seconds > 0))
        return fail("testpmd pvp: cpus must be >= 0, queue_size and seconds > 0");
    std::string err;
    Run r;
    auto huge = lab::HugepageReservation::reserve(kHugepagesNeeded);
    if (!huge) return fail(huge.error());
    r.huge.emplace(std::move(*huge));
    r.huge_dir = r.huge->dir();
    remove_stale(r.huge_dir, cfg.workdir);

    const std::string tag = new_tag();
    const std::string sock = (fs::path(cfg.workdir) / (tag + ".sock")).string();
    if (sock.size() >= sizeof(sockaddr_un::sun_path)) return fail("socket path too long: " + sock);
    r.sock = sock;
    std::error_code ec;
    fs::remove(r.sock, ec);

    // The vhost-user server side first; it reaches its prompt before any peer.
    r.vh_prefix = tag + "-vh";
    r.vu_prefix = tag + "-vu";
    const std::string q = std::to_string(cfg.queue_size);
    if (!start(r.vhost,
               testpmd_args(*exe, cfg.vhost_cpu, r.huge_dir, r.vh_prefix,
                            "net_vhost0,iface=" + r.sock + ",queues=1", cfg.queue_size, "macswap"),
               err) ||
        !start(r.virtio,
               testpmd_args(*exe, cfg.virtio_cpu, r.huge_dir, r.vu_prefix,
                            "net_virtio_user0,path=" + r.sock + ",queues=1,queue_size=" + q,
                            cfg.queue_size, "io"),
               err))
        return fail(err);

    std::optional<lab::TelemetryClient> tvh, tvu;
    for (auto [t, tp, prefix] :
         {std::tuple{&tvh, &r.vhost, r.vh_prefix}, std::tuple{&tvu, &r.virtio, r.vu_prefix}}) {
        auto c = lab::TelemetryClient::connect(lab::dpdk_telemetry_path(prefix));
        if (!c) return fail(tp->name + " testpmd: " + c.error());
        t->emplace(std::move(*c));
    }
    // The vhost port is up once the frontend has set DRIVER_OK.
    bool up = false;
    pump({&r.vhost, &r.virtio}, Clock::now() + kLinkTimeout, [&] {
        auto j = tvh->query("/ethdev/link_status,0");
        up = j && j->is_object() && j->contains("status") && (*j)["status"] == "UP";
        return up;
    });
    if (!up) return fail("vhost port not up; virtio-user output ends:\n" + r.virtio.last_output());
    // The forwarder first, so the 32 bursts find it polling.
    if (!command(r.virtio, "start", err) || !command(r.vhost, "start tx_first 32", err))
        return fail(err);

    sleep_pumping({&r.vhost, &r.virtio}, cfg.warmup_s);
    const auto vu0 = sample(*tvu);
    const auto vh0 = sample(*tvh);
    sleep_pumping({&r.vhost, &r.virtio}, cfg.seconds);
    const auto vu1 = sample(*tvu);
    const auto vh1 = sample(*tvh);
    if (!vu0 || !vh0 || !vu1 || !vh1) {
        err = "telemetry /ethdev/stats,0 failed";
        for (Testpmd* t : {&r.vhost, &r.virtio})
            if (!t->child->running()) err += "; " + t->describe_exit();
        return fail(err);
    }
    res.virtio_side_mpps = rate_mpps(*vu0, *vu1);
    res.vhost_side_mpps = rate_mpps(*vh0, *vh1);
    res.mpps = res.virtio_side_mpps;
    if (!(res.mpps > 0)) return fail("no packets forwarded in the window");
    res.ok = true;
    return res;
}


// ---- virtio-user client against a backend under test ----------------------

constexpr auto kFinalTimeout = std::chrono::seconds(5);
constexpr auto kDrain = std::chrono::milliseconds(300);  // backend empties the rings after `stop`
constexpr const char* kMbufs = "--total-num-mbufs=16384";

struct PortCounts {
    double t_s = 0;
    uint64_t ipackets = 0, opackets = 0;
};

std::optional<PortCounts> port_counts(lab::TelemetryClient& t) {
    const auto t0 = Clock::now();
    auto j = t.query("/ethdev/stats,0");
    const auto t1 = Clock::now();
    if (!j || !j->is_object()) return std::nullopt;
    for (const char* k : {"ipackets", "opackets"})
        if (!j->contains(k) || !(*j)[k].is_number_unsigned()) return std::nullopt;
    PortCounts c;
    c.t_s = std::chrono::duration<double>((t0 + (t1 - t0) / 2).time_since_epoch()).count();
    c.ipackets = (*j)["ipackets"].get<uint64_t>();
    c.opackets = (*j)["opackets"].get<uint64_t>();
    return c;
}

bool link_up(lab::TelemetryClient& t) {
    auto j = t.query("/ethdev/link_status,0");
    return j && j->is_object() && j->contains("status") && (*j)["status"] == "UP";
}

// utime + stime of every thread of `pid`, in seconds.
std::optional<double> process_cpu_s(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return std::nullopt;
    const auto close = line.rfind(") ");  // comm may hold spaces and ')'
    if (close == std::string::npos) return std::nullopt;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    // Fields after comm start at 3 (state); utime and stime are 14 and 15.
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
        if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    }
    if (!rest) return std::nullopt;
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The value of `key` in a "final k=v k=v" line.
std::optional<uint64_t> final_value(const std::string& line, const std::string& key) {
    std::istringstream in(line);
    for (std::string kv; in >> kv;) {
        if (kv.size() > key.size() + 1 && kv.compare(0, key.size() + 1, key + "=") == 0) {
            char* end = nullptr;
            errno = 0;
            const unsigned long long v = std::strtoull(kv.c_str() + key.size() + 1, &end, 10);
            if (errno == 0 && end && *end == '\0') return v;
        }
    }
    return std::nullopt;
}

// The last line of `out` that starts with "final ".
std::string final_line(const std::string& out) {
    std::string last;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
        if (l.rfind("final ", 0) == 0) last = l;
    return last;
}

// The rest of the last line of virtio's init log holding `key`, after it
// (a port reconfigured renegotiates: the last word counts).
std::string init_log_after(const std::string& out, std::string_view key) {
    const std::size_t at = out.rfind(key);
    if (at == std::string::npos) return {};
    const std::size_t from = at + key.size();
    return out.substr(from, out.find_first_of("\r\n", from) - from);
}

uint64_t init_log_features(const std::string& out, std::string_view key) {
    return std::strtoull(init_log_after(out, key).c_str(), nullptr, 16);  // PRIx64, no 0x
}

// "set_rxtx_funcs(): virtio: using inorder Rx path on port 0" -> "inorder".
std::string init_log_path(const std::string& out, std::string_view dir) {
    const std::string tail = std::string(" ") + std::string(dir) + " path on port 0";
    const std::size_t end = out.rfind(tail);
    if (end == std::string::npos) return {};
    constexpr std::string_view kUsing = "virtio: using ";
    const std::size_t at = out.rfind(kUsing, end);
    return at == std::string::npos ? std::string() : out.substr(at + kUsing.size(), end - at - kUsing.size());
}

VirtioUserPeerResult run_peer(const VirtioUserPeerConfig& cfg) {
    VirtioUserPeerResult res;
    const auto fail = [&res](std::string why) {
        res.error = std::move(why);
        return res;
    };
    auto exe = lab::find_executable(cfg.testpmd);
    if (!exe) return fail(exe.error() + " (Debian: dpdk-dev)");
    if (cfg.backend_cpu < 0 || cfg.client_cpu < 0 || cfg.queue_size == 0 || !(cfg.seconds > 0) ||
        cfg.warmup_s < 0 || cfg.frame_bytes < 60)
        return fail("virtio-user peer: cpus >= 0, queue_size and seconds > 0, frames >= 60 bytes");
    const bool dpdk_backend = cfg.backend_command.empty();
    std::string err;
    Run r;  // r.vhost: the backend, r.virtio: the client
    r.vhost.name = dpdk_backend ? "vhost" : "backend";
    r.vhost.interactive = dpdk_backend;
    if (cfg.hugepages) {
        auto huge = lab::HugepageReservation::reserve(kHugepagesNeeded);
        if (!huge) return fail(huge.error());
        r.huge.emplace(std::move(*huge));
        r.huge_dir = r.huge->dir();
    }
    remove_stale(r.huge_dir, cfg.workdir);
    const std::string tag = new_tag();
    r.sock = (fs::path(cfg.workdir) / (tag + ".sock")).string();
    if (r.sock.size() >= sizeof(sockaddr_un::sun_path)) return fail("socket path too long: " + r.sock);
    std::error_code ec;
    fs::remove(r.sock, ec);
    r.vh_prefix = tag + "-vh";
    r.vu_prefix = tag + "-vu";

    if (dpdk_backend) {
        if (!start(r.vhost,
                   testpmd_args(*exe, cfg.backend_cpu, r.huge_dir, r.vh_prefix,
                                "net_vhost0,iface=" + r.sock + ",queues=1", cfg.queue_size,
                                "macswap", {kMbufs}),
                   err))
            return fail(err);
    } else {
        std::vector<std::string> argv = cfg.backend_command;
        for (auto& a : argv)
            if (a == "{sock}") a = r.sock;
        auto c = lab::Child::spawn(argv);
        if (!c) return fail("backend: " + c.error());
        r.vhost.child.emplace(std::move(*c));
        const auto ready_ms = std::chrono::milliseconds(
            static_cast<int64_t>(std::max(0.0, cfg.ready_timeout_s) * 1000));
        if (!r.vhost.child->wait_for_line("ready", ready_ms))
            return fail("backend printed no 'ready' within " + std::to_string(ready_ms.count()) + " ms" +
                        (r.vhost.child->running() ? std::string()
                                                  : " (" + r.vhost.describe_exit() + ")") +
                        "; its output ends:\n" + r.vhost.last_output());
    }
    if (!start(r.virtio,
               testpmd_args(*exe, cfg.client_cpu, r.huge_dir, r.vu_prefix,
                            "net_virtio_user0,path=" + r.sock + ",queues=1,queue_size=" +
                                std::to_string(cfg.queue_size) +
                                ",in_order=" + (cfg.in_order ? "1" : "0"),
                            cfg.queue_size, "io", {kMbufs},
                            // The negotiated features and the chosen paths, for the record.
                            {"--log-level=pmd.net.virtio.init:debug"}),
               err) ||
        !command(r.virtio, "set txpkts " + std::to_string(cfg.frame_bytes), err))
        return fail(err);

    auto tvu = lab::TelemetryClient::connect(lab::dpdk_telemetry_path(r.vu_prefix));
    if (!tvu) return fail("virtio-user testpmd: " + tvu.error());
    std::optional<lab::TelemetryClient> tvh;
    if (dpdk_backend) {
        auto c = lab::TelemetryClient::connect(lab::dpdk_telemetry_path(r.vh_prefix));
        if (!c) return fail("vhost testpmd: " + c.error());
        tvh.emplace(std::move(*c));
    }
    const bool up = pump({&r.vhost, &r.virtio}, Clock::now() + kLinkTimeout, [&] {
        return link_up(*tvu) && (!tvh || link_up(*tvh));
    });
    if (!up)
        return fail("link not up; virtio-user output ends:\n" + r.virtio.last_output() +
                    "\nbackend output ends:\n" + r.vhost.last_output());
    if (dpdk_backend && !command(r.vhost, "start", err)) return fail(err);
    if (!command(r.virtio, "start tx_first 32", err)) return fail(err);
    const std::string& log = r.virtio.child->output();
    res.offered_features = init_log_features(log, "host_features before negotiate = ");
    res.features = init_log_features(log, "features after negotiate = ");
    res.rx_path = init_log_path(log, "Rx");
    res.tx_path = init_log_path(log, "Tx");

    sleep_pumping({&r.vhost, &r.virtio}, cfg.warmup_s);
    const pid_t bpid = r.vhost.child->pid();
    const auto c0 = port_counts(*tvu);
    const auto cpu0 = process_cpu_s(bpid);
    sleep_pumping({&r.vhost, &r.virtio}, cfg.seconds);
    const auto c1 = port_counts(*tvu);
    const auto cpu1 = process_cpu_s(bpid);
    if (!c0 || !c1 || !cpu0 || !cpu1) {
        err = "counters not readable mid-run";
        for (Testpmd* t : {&r.vhost, &r.virtio})
            if (!t->child->running()) err += "; " + t->describe_exit() + ":\n" + t->last_output();
        return fail(err);
    }
    const double dt = c1->t_s - c0->t_s;
    res.window_rx_pkts = c1->ipackets - std::min(c1->ipackets, c0->ipackets);
    res.rx_mpps = dt > 0 ? static_cast<double>(res.window_rx_pkts) / dt / 1e6 : 0;
    res.tx_mpps = dt > 0 ? static_cast<double>(c1->opackets - std::min(c1->opackets, c0->opackets)) /
                               dt / 1e6
                         : 0;
    res.backend_cpu_s = *cpu1 - *cpu0;

    // Stop the guest, let the backend drain its tx ring, then read every total.
    if (!command(r.virtio, "stop", err)) return fail(err);
    sleep_pumping({&r.vhost, &r.virtio}, std::chrono::duration<double>(kDrain).count());
    const auto cend = port_counts(*tvu);
    if (!cend) return fail("virtio-user telemetry failed after stop");
    res.client_rx = cend->ipackets;
    res.client_tx = cend->opackets;
    if (dpdk_backend) {
        const auto bend = port_counts(*tvh);
        if (!bend) return fail("vhost telemetry failed after stop");
        res.backend_rx = bend->ipackets;
        res.backend_tx = bend->opackets;
    } else {
        const lab::ExitStatus st = r.vhost.child->stop(kFinalTimeout);
        res.backend_final = final_line(r.vhost.child->output());
        const auto rx = final_value(res.backend_final, "rx_pkts");
        const auto tx = final_value(res.backend_final, "tx_pkts");
        if (!rx || !tx)
            return fail("backend (" + st.to_string() +
                        ") printed no 'final' line with rx_pkts and tx_pkts; its output ends:\n" +
                        r.vhost.last_output());
        res.backend_rx = *rx;
        res.backend_tx = *tx;
    }
    if (!(res.rx_mpps > 0)) return fail("no packets came back in the window");
    res.ok = true;
    return res;
}

}  // namespace

bool testpmd_available(const std::string& testpmd) noexcept {
    try {
        return lab::find_executable(testpmd).has_value();
    } catch (...) {
        return false;
    }
}

namespace {
/// A run's exceptions as its result's error (the Run destructors have
/// stopped every process by then).
template <typename R, typename F>
R error_as_result(const char* what, F&& run) noexcept {
    try {
        return run();
    } catch (const std::exception& e) {
        R res;
        res.error = std::string(what) + ": " + e.what();
        return res;
    } catch (...) {
        R res;
        res.error = std::string(what) + ": unknown exception";
        return res;
    }
}
}  // namespace

TestpmdResult run_testpmd_pvp(const TestpmdConfig& cfg) noexcept {
    return error_as_result<TestpmdResult>("testpmd pvp", [&] { return run(cfg); });
}

VirtioUserPeerResult run_virtio_user_peer(const VirtioUserPeerConfig& cfg) noexcept {
    return error_as_result<VirtioUserPeerResult>("virtio-user peer", [&] { return run_peer(cfg); });
}

}  // namespace pvnet::bench
