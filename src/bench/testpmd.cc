// The testpmd PVP baseline: two dpdk-testpmd processes started with fork and
// exec, each with a socketpair on stdin (commands, sent with MSG_NOSIGNAL so a
// dead child cannot raise SIGPIPE here) and a pipe on stdout and stderr (kept
// drained; a "testpmd> " prompt after a command means the command ran — the
// prompt is written unbuffered, printf output is not). Rates come from the
// DPDK telemetry socket, read twice with CLOCK_MONOTONIC around each read.
#include "pvnet/bench/testpmd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

namespace pvnet::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kStartTimeout = std::chrono::seconds(20);  // EAL init, mbuf pool in hugepages
constexpr auto kCommandTimeout = std::chrono::seconds(5);
constexpr auto kLinkTimeout = std::chrono::seconds(10);
constexpr auto kQuitTimeout = std::chrono::seconds(5);
constexpr auto kTermTimeout = std::chrono::seconds(2);
constexpr auto kKillTimeout = std::chrono::seconds(2);
constexpr int kTelemetryTimeoutMs = 1000;
// Each testpmd maps ~370 MiB (its default mbuf pool); 2 × that plus slack.
constexpr long kHugepagesNeeded = 512;
constexpr std::string_view kPrompt = "testpmd> ";
constexpr std::string_view kTag = "pvnet-tp-";  // file-prefix and socket names
constexpr std::size_t kLogTail = 4096;
constexpr const char* kHugeSys = "/sys/kernel/mm/hugepages/hugepages-2048kB/";

// ---- small file helpers ----------------------------------------------------

std::optional<long> read_long(const std::string& path) {
    std::ifstream in(path);
    long v = 0;
    if (!(in >> v)) return std::nullopt;
    return v;
}

bool write_long(const std::string& path, long v) {
    std::ofstream out(path);
    out << v;
    out.flush();
    return static_cast<bool>(out);
}

std::optional<std::string> find_executable(const std::string& name) {
    if (name.empty()) return std::nullopt;
    if (name.find('/') != std::string::npos)
        return ::access(name.c_str(), X_OK) == 0 ? std::optional(name) : std::nullopt;
    const char* path = std::getenv("PATH");
    std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (true) {
        const auto colon = rest.find(':');
        const std::string_view dir = rest.substr(0, colon);
        std::string cand(dir.empty() ? std::string_view(".") : dir);
        cand += '/';
        cand += name;
        struct stat st {};
        if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            ::access(cand.c_str(), X_OK) == 0)
            return cand;
        if (colon == std::string_view::npos) return std::nullopt;
        rest.remove_prefix(colon + 1);
    }
}

// Where EAL keeps its per-prefix runtime directory (eal_get_runtime_dir()).
std::string dpdk_runtime_dir(const std::string& prefix) {
    std::string base = "/var/run";
    if (::getuid() != 0) {
        const char* xdg = std::getenv("XDG_RUNTIME_DIR");
        base = xdg ? xdg : "/tmp";
    }
    return base + "/dpdk/" + prefix;
}

// A hugetlbfs mount serving 2 MiB pages, or "" if none.
std::string find_huge_dir() {
    const long def_kb = [] {
        std::ifstream in("/proc/meminfo");
        std::string key;
        long v = 0;
        while (in >> key >> v) {
            if (key == "Hugepagesize:") return v;
            in.ignore(1 << 12, '\n');
        }
        return 0L;
    }();
    std::ifstream in("/proc/mounts");
    std::string dev, dir, type, opts, rest;
    while (in >> dev >> dir >> type >> opts && std::getline(in, rest)) {
        if (type != "hugetlbfs") continue;
        const bool sized = opts.find("pagesize=") != std::string::npos;
        if (opts.find("pagesize=2M") != std::string::npos || (!sized && def_kb == 2048)) return dir;
    }
    return {};
}

// Mounts hugetlbfs and grows the 2 MiB pool as needed. Returns the mount, or
// an error in `err`.
std::string ensure_hugepages(std::string& err) {
    const bool root = ::geteuid() == 0;
    std::string dir = find_huge_dir();
    if (dir.empty()) {
        if (!root) {
            err = "no hugetlbfs mount for 2 MiB pages (needs root to mount one)";
            return {};
        }
        ::mkdir("/dev/hugepages", 0755);
        if (::mount("nodev", "/dev/hugepages", "hugetlbfs", 0, "pagesize=2M") != 0) {
            err = std::string("mount hugetlbfs on /dev/hugepages: ") + std::strerror(errno);
            return {};
        }
        dir = "/dev/hugepages";
    }
    const std::string sys = kHugeSys;
    const long free_pages = read_long(sys + "free_hugepages").value_or(0);
    if (free_pages >= kHugepagesNeeded) return dir;
    if (!root) {
        err = "only " + std::to_string(free_pages) + " free 2 MiB hugepages, need " +
              std::to_string(kHugepagesNeeded) + " (needs root to reserve them)";
        return {};
    }
    const long total = read_long(sys + "nr_hugepages").value_or(0);
    write_long(sys + "nr_hugepages", total + (kHugepagesNeeded - free_pages));
    const long now_free = read_long(sys + "free_hugepages").value_or(0);
    if (now_free < kHugepagesNeeded) {
        err = "could reserve only " + std::to_string(now_free) + " free 2 MiB hugepages, need " +
              std::to_string(kHugepagesNeeded);
        return {};
    }
    return dir;
}

// Hugepage files and the runtime directory of one EAL file-prefix.
void remove_prefix_files(const std::string& huge_dir, const std::string& prefix) {
    std::error_code ec;
    if (!huge_dir.empty()) {
        const std::string stem = prefix + "map_";
        for (fs::directory_iterator it(huge_dir, ec), end; !ec && it != end; it.increment(ec)) {
            if (it->path().filename().string().rfind(stem, 0) == 0) fs::remove(it->path(), ec);
        }
    }
    fs::remove_all(dpdk_runtime_dir(prefix), ec);
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
    const std::string run_base = fs::path(dpdk_runtime_dir("x")).parent_path().string();
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

struct Child {
    std::string name;
    pid_t pid = -1;
    int in = -1;   // our end of its stdin (socketpair)
    int out = -1;  // read end of its stdout+stderr (pipe)
    bool reaped = false;
    int status = 0;
    uint64_t prompts = 0;  // "testpmd> " seen so far
    std::string tail;      // last output, for error messages
    std::string carry;     // last bytes of the previous read, to find a split prompt

    bool alive() {
        if (pid <= 0 || reaped) return false;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) reaped = true;
        return !reaped;
    }
    std::string describe_exit() const {
        if (!reaped) return name + " testpmd still running";
        if (WIFEXITED(status))
            return name + " testpmd exited with " + std::to_string(WEXITSTATUS(status));
        if (WIFSIGNALED(status))
            return name + " testpmd killed by signal " + std::to_string(WTERMSIG(status));
        return name + " testpmd ended";
    }
    void consume(const char* p, std::size_t n) {
        std::string scan = carry;
        scan.append(p, n);
        for (std::size_t at = scan.find(kPrompt); at != std::string::npos;
             at = scan.find(kPrompt, at + kPrompt.size()))
            ++prompts;
        const std::size_t keep = std::min(scan.size(), kPrompt.size() - 1);
        carry = scan.substr(scan.size() - keep);
        tail.append(p, n);
        if (tail.size() > 2 * kLogTail) tail.erase(0, tail.size() - kLogTail);
    }
    std::string last_output() const {
        return tail.size() > kLogTail ? tail.substr(tail.size() - kLogTail) : tail;
    }
};

std::vector<char*> c_argv(std::vector<std::string>& args) {
    std::vector<char*> v;
    for (auto& a : args) v.push_back(a.data());
    v.push_back(nullptr);
    return v;
}

bool spawn(Child& c, const std::string& exe, std::vector<std::string> args, std::string& err) {
    int sv[2];
    int po[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        err = std::string("socketpair: ") + std::strerror(errno);
        return false;
    }
    if (::pipe2(po, O_CLOEXEC) != 0) {
        err = std::string("pipe: ") + std::strerror(errno);
        ::close(sv[0]);
        ::close(sv[1]);
        return false;
    }
    std::vector<char*> argv = c_argv(args);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        // Only async-signal-safe calls from here to exec.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::setpgid(0, 0);  // its own group: SIGTERM/SIGKILL reach anything it starts
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::signal(SIGPIPE, SIG_DFL);
        if (::dup2(sv[1], 0) < 0 || ::dup2(po[1], 1) < 0 || ::dup2(po[1], 2) < 0) ::_exit(127);
        ::syscall(SYS_close_range, 3U, ~0U, 0U);  // other fds of this process stay here
        ::execv(exe.c_str(), argv.data());
        ::_exit(127);
    }
    ::close(sv[1]);
    ::close(po[1]);
    if (pid > 0) ::setpgid(pid, pid);  // also here: no window where a kill misses the group
    if (pid < 0) {
        err = std::string("fork: ") + std::strerror(errno);
        ::close(sv[0]);
        ::close(po[0]);
        return false;
    }
    ::fcntl(po[0], F_SETFL, O_NONBLOCK);
    c.pid = pid;
    c.in = sv[0];
    c.out = po[0];
    return true;
}

// Drains the children's output until `done()` or `until`; false on timeout.
template <class Pred>
bool pump(std::vector<Child*> kids, Clock::time_point until, Pred done) {
    char buf[8192];
    while (true) {
        if (done()) return true;
        const auto now = Clock::now();
        if (now >= until) return false;
        std::vector<pollfd> fds;
        std::vector<Child*> who;
        for (Child* c : kids) {
            if (c->out >= 0) {
                fds.push_back({c->out, POLLIN, 0});
                who.push_back(c);
            }
        }
        const auto left = std::chrono::duration_cast<milliseconds>(until - now).count();
        const int wait_ms = static_cast<int>(std::clamp<long long>(left, 1, 20));
        if (fds.empty()) {
            ::poll(nullptr, 0, wait_ms);
            continue;
        }
        if (::poll(fds.data(), fds.size(), wait_ms) <= 0) continue;
        for (std::size_t i = 0; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            while (true) {
                const ssize_t n = ::read(who[i]->out, buf, sizeof buf);
                if (n > 0) {
                    who[i]->consume(buf, static_cast<std::size_t>(n));
                    continue;
                }
                if (n == 0 || (errno != EAGAIN && errno != EINTR)) {  // EOF: it closed stdout
                    ::close(who[i]->out);
                    who[i]->out = -1;
                }
                if (n < 0 && errno == EINTR) continue;
                break;
            }
        }
    }
}

void sleep_pumping(std::vector<Child*> kids, double seconds) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(std::max(0.0, seconds)));
    pump(std::move(kids), until, [] { return false; });
}

bool send_line(Child& c, const std::string& line) {
    if (c.in < 0) return false;
    const std::string s = line + "\n";
    return ::send(c.in, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
}

// Waits for the next prompt (the child reached its command line, or ran a command).
bool wait_prompt(Child& c, uint64_t seen, std::chrono::seconds timeout, std::string& err) {
    bool died = false;
    const bool ok = pump({&c}, Clock::now() + timeout, [&] {
        if (c.prompts > seen) return true;
        if (!c.alive() && c.out < 0) died = true;  // exited and its output is drained
        return died;
    });
    if (ok && !died) return true;
    err = (died ? c.describe_exit()
                : c.name + " testpmd: no prompt within " + std::to_string(timeout.count()) + " s") +
          "; its output ends:\n" + c.last_output();
    return false;
}

bool command(Child& c, const std::string& cmd, std::string& err) {
    const uint64_t seen = c.prompts;
    if (!send_line(c, cmd)) {
        err = c.name + " testpmd: cannot send '" + cmd + "': " + std::strerror(errno);
        return false;
    }
    return wait_prompt(c, seen, kCommandTimeout, err);
}

void signal_group(pid_t pid, int sig) {
    if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

// quit on its command line, then SIGTERM, then SIGKILL; each wait bounded.
void stop(Child& c) {
    if (c.pid <= 0) return;
    if (c.alive()) {
        send_line(c, "stop");
        send_line(c, "quit");
    }
    if (c.in >= 0) {
        ::close(c.in);  // EOF on its stdin also ends the command line
        c.in = -1;
    }
    const auto exited = [&] { return !c.alive(); };
    if (!pump({&c}, Clock::now() + kQuitTimeout, exited)) {
        signal_group(c.pid, SIGTERM);
        if (!pump({&c}, Clock::now() + kTermTimeout, exited)) {
            signal_group(c.pid, SIGKILL);
            pump({&c}, Clock::now() + kKillTimeout, exited);
        }
    }
    if (c.out >= 0) {
        ::close(c.out);
        c.out = -1;
    }
}

// ---- telemetry -------------------------------------------------------------

struct Telemetry {
    int fd = -1;
    ~Telemetry() {
        if (fd >= 0) ::close(fd);
    }

    std::optional<std::string> recv_msg() {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, kTelemetryTimeoutMs) <= 0) return std::nullopt;
        std::string buf(1 << 16, '\0');
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n <= 0) return std::nullopt;
        buf.resize(static_cast<std::size_t>(n));
        return buf;
    }

    bool connect_to(const std::string& path) {
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        if (path.size() >= sizeof sa.sun_path) return false;
        std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
        fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0) return false;
        if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || !recv_msg()) {
            ::close(fd);
            fd = -1;
            return false;
        }
        return true;  // the greeting ({"version":…,"max_output_len":…}) was read
    }

    std::optional<nlohmann::json> query(const std::string& cmd) {
        if (fd < 0 || ::send(fd, cmd.data(), cmd.size(), MSG_NOSIGNAL) < 0) return std::nullopt;
        auto msg = recv_msg();
        if (!msg) return std::nullopt;
        auto j = nlohmann::json::parse(*msg, nullptr, false);
        if (j.is_discarded() || !j.contains(cmd.substr(0, cmd.find(',')))) return std::nullopt;
        return j[cmd.substr(0, cmd.find(','))];
    }
};

struct Sample {
    double t_s = 0;         // CLOCK_MONOTONIC, middle of the query
    uint64_t opackets = 0;  // packets the port transmitted
};

std::optional<Sample> sample(Telemetry& t) {
    const auto t0 = Clock::now();
    auto j = t.query("/ethdev/stats,0");
    const auto t1 = Clock::now();
    if (!j || !j->contains("opackets") || !(*j)["opackets"].is_number_unsigned())
        return std::nullopt;
    Sample s;
    s.t_s = std::chrono::duration<double>((t0 + (t1 - t0) / 2).time_since_epoch()).count();
    s.opackets = (*j)["opackets"].get<uint64_t>();
    return s;
}

double rate_mpps(const Sample& a, const Sample& b) {
    const double dt = b.t_s - a.t_s;
    return dt > 0 ? static_cast<double>(b.opackets - a.opackets) / dt / 1e6 : 0;
}

// Everything one run owns; the destructor stops the children and removes files
// on every exit path.
struct Run {
    Child vhost;
    Child virtio;
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

// EAL options, then testpmd's own after "--".
std::vector<std::string> testpmd_args(const std::string& exe, int cpu, const std::string& huge_dir,
                                      const std::string& prefix, const std::string& vdev,
                                      uint16_t qsize, const char* fwd) {
    const std::string c = std::to_string(cpu), q = std::to_string(qsize);
    std::vector<std::string> a{exe, "--lcores=0@" + c + ",1@" + c, "--no-pci"};
    for (std::string s : {std::string("--single-file-segments"), "--huge-dir=" + huge_dir,
                          "--file-prefix=" + prefix, "--vdev=" + vdev, std::string("--"),
                          std::string("-i"), std::string("--nb-cores=1"), "--txd=" + q,
                          "--rxd=" + q, std::string("--forward-mode=") + fwd})
        a.push_back(std::move(s));
    return a;
}

TestpmdResult run(const TestpmdConfig& cfg) {
    TestpmdResult res;
    const auto fail = [&res](std::string why) {
        res.error = std::move(why);
        return res;
    };
    const auto exe = find_executable(cfg.testpmd);
    if (!exe) return fail(cfg.testpmd + ": not found or not executable (Debian: dpdk-dev)");
    if (cfg.vhost_cpu < 0 || cfg.virtio_cpu < 0 || cfg.queue_size == 0 || !(cfg.seconds > 0))
        return fail("testpmd pvp: cpus must be >= 0, queue_size and seconds > 0");
    std::string err;
    Run r;
    r.vhost.name = "vhost";
    r.virtio.name = "virtio-user";
    r.huge_dir = ensure_hugepages(err);
    if (r.huge_dir.empty()) return fail(err);
    remove_stale(r.huge_dir, cfg.workdir);

    static std::atomic<unsigned> serial{0};
    const std::string tag =
        std::string(kTag) + std::to_string(::getpid()) + "-" + std::to_string(serial.fetch_add(1));
    const std::string sock = (fs::path(cfg.workdir) / (tag + ".sock")).string();
    if (sock.size() >= sizeof(sockaddr_un::sun_path)) return fail("socket path too long: " + sock);
    r.sock = sock;
    std::error_code ec;
    fs::remove(r.sock, ec);

    // The vhost-user server side first; it reaches its prompt before any peer.
    r.vh_prefix = tag + "-vh";
    r.vu_prefix = tag + "-vu";
    const std::string q = std::to_string(cfg.queue_size);
    if (!spawn(r.vhost, *exe,
               testpmd_args(*exe, cfg.vhost_cpu, r.huge_dir, r.vh_prefix,
                            "net_vhost0,iface=" + r.sock + ",queues=1", cfg.queue_size, "macswap"),
               err) ||
        !wait_prompt(r.vhost, 0, kStartTimeout, err) ||
        !spawn(r.virtio, *exe,
               testpmd_args(*exe, cfg.virtio_cpu, r.huge_dir, r.vu_prefix,
                            "net_virtio_user0,path=" + r.sock + ",queues=1,queue_size=" + q,
                            cfg.queue_size, "io"),
               err) ||
        !wait_prompt(r.virtio, 0, kStartTimeout, err))
        return fail(err);

    Telemetry tvh, tvu;
    for (auto [t, c, prefix] :
         {std::tuple{&tvh, &r.vhost, r.vh_prefix}, std::tuple{&tvu, &r.virtio, r.vu_prefix}}) {
        const std::string path = dpdk_runtime_dir(prefix) + "/dpdk_telemetry.v2";
        if (!t->connect_to(path)) return fail(c->name + " testpmd: no telemetry at " + path);
    }
    // The vhost port is up once the frontend has set DRIVER_OK.
    bool up = false;
    pump({&r.vhost, &r.virtio}, Clock::now() + kLinkTimeout, [&] {
        auto j = tvh.query("/ethdev/link_status,0");
        up = j && j->contains("status") && (*j)["status"] == "UP";
        return up;
    });
    if (!up) return fail("vhost port not up; virtio-user output ends:\n" + r.virtio.last_output());
    // The forwarder first, so the 32 bursts find it polling.
    if (!command(r.virtio, "start", err) || !command(r.vhost, "start tx_first 32", err))
        return fail(err);

    sleep_pumping({&r.vhost, &r.virtio}, cfg.warmup_s);
    const auto vu0 = sample(tvu);
    const auto vh0 = sample(tvh);
    sleep_pumping({&r.vhost, &r.virtio}, cfg.seconds);
    const auto vu1 = sample(tvu);
    const auto vh1 = sample(tvh);
    if (!vu0 || !vh0 || !vu1 || !vh1) {
        err = "telemetry /ethdev/stats,0 failed";
        for (Child* c : {&r.vhost, &r.virtio})
            if (!c->alive()) err += "; " + c->describe_exit();
        return fail(err);
    }
    res.virtio_side_mpps = rate_mpps(*vu0, *vu1);
    res.vhost_side_mpps = rate_mpps(*vh0, *vh1);
    res.mpps = res.virtio_side_mpps;
    if (!(res.mpps > 0)) return fail("no packets forwarded in the window");
    res.ok = true;
    return res;
}

}  // namespace

bool testpmd_available(const std::string& testpmd) noexcept {
    try {
        return find_executable(testpmd).has_value();
    } catch (...) {
        return false;
    }
}

TestpmdResult run_testpmd_pvp(const TestpmdConfig& cfg) noexcept {
    try {
        return run(cfg);
    } catch (const std::exception& e) {  // the Run destructor has stopped testpmd
        TestpmdResult res;
        res.error = std::string("testpmd pvp: ") + e.what();
        return res;
    } catch (...) {
        TestpmdResult res;
        res.error = "testpmd pvp: unknown exception";
        return res;
    }
}

}  // namespace pvnet::bench
