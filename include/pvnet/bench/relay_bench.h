// The relay experiment's pieces (issue 5, seed 002): two namespaces joined
// either by a veth pair (the kernel's ceiling) or by a `pvnet relay` child
// process between two taps, and the kernel tools that measure the path —
// iperf3 (TCP throughput), sockperf (ping-pong latency), ping (rtt).
// Shared by `pvnet bench relay` and the relay integration tests.
//
// Namespace A holds 192.0.2.1/24 (clients), B 192.0.2.2/24 (servers); each
// RelayBed makes its own uniquely named pair and deletes it, with its taps
// and relay, when dropped. Every wait is bounded; every tool's output is
// parsed defensively (an unexpected shape is an error naming the tool).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pvnet/port/netns.h"
#include "pvnet/util/result.h"

namespace pvnet::bench {

/// Makes every wait below end early and kill what it waits for (a signal
/// handler may call it); the testbeds then tear down as on any error.
void request_abort() noexcept;
bool abort_requested() noexcept;

/// A child process, its stdout and stderr in one pipe. Dropping it stops it
/// (SIGTERM, then SIGKILL after a grace period) and reaps it.
class Child {
public:
    /// Runs argv[0] (PATH searched); its stdin is /dev/null.
    static Result<Child, std::string> spawn(const std::vector<std::string>& argv);
    Child(Child&& o) noexcept;
    Child& operator=(Child&&) = delete;
    Child(const Child&) = delete;
    ~Child();

    pid_t pid() const noexcept { return pid_; }
    /// Reads output until a line equal to `line`; false on EOF or timeout.
    /// Everything read is kept (output()).
    bool wait_for_line(std::string_view line, std::chrono::milliseconds timeout);
    /// Collects output until the child exits; past `timeout` it is killed.
    /// Returns its exit status (-1: killed or died of a signal).
    int finish(std::chrono::milliseconds timeout);
    /// SIGTERM, up to `grace` for it to exit, then SIGKILL; collects output.
    /// Returns the exit status as finish() does. Idempotent.
    int stop(std::chrono::milliseconds grace = std::chrono::seconds(3));
    const std::string& output() const noexcept { return out_; }

private:
    Child(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
    /// Reads what is there (waiting up to `wait`); false at EOF.
    bool drain(std::chrono::milliseconds wait);
    bool reaped(int& status);

    pid_t pid_ = -1;
    int fd_ = -1;
    int status_ = -1;
    std::string out_;
};

/// One column of the experiment: a veth pair, or `pvnet relay` with flags.
struct RelayVariant {
    std::string name;
    bool veth = false;
    std::vector<std::string> relay_args;  ///< after `relay --guest-tap ... --host-netns ...`
};

/// veth, plain (the plain tun relay), plain-nooff (the same without offloads),
/// napi, napi+at-rx, napi+coalesce, napi+direct, napi+direct+spin.
Result<RelayVariant, std::string> relay_variant(std::string_view name);

/// Two namespaces, addressed and reachable, joined as `variant` says.
class RelayBed {
public:
    static constexpr const char* kIpA = "192.0.2.1";
    static constexpr const char* kIpB = "192.0.2.2";

    /// `pvnet_exe` runs the relay (the bench passes /proc/self/exe); `tag`
    /// makes the namespace names unique: "<pid>-<n>", or with a letter first. Fails with the relay's own output if
    /// it does not print "ready" within 10 s.
    static Result<std::unique_ptr<RelayBed>, std::string> create(const RelayVariant& variant,
                                                                 const std::string& pvnet_exe,
                                                                 const std::string& tag);
    ~RelayBed();
    RelayBed(const RelayBed&) = delete;
    RelayBed& operator=(const RelayBed&) = delete;

    const std::string& ns_a() const noexcept { return ns_a_->name(); }
    const std::string& ns_b() const noexcept { return ns_b_->name(); }
    const std::string& if_a() const noexcept { return if_a_; }
    const std::string& if_b() const noexcept { return if_b_; }
    /// The relay process (nullopt for veth).
    std::optional<pid_t> relay_pid() const noexcept;
    /// Stops the relay and returns its output (its "final" counters line);
    /// empty for veth.
    std::string stop_relay();

private:
    RelayBed() = default;

    // Declared before relay_: the relay stops before its namespaces go.
    std::optional<port::ScopedNetns> ns_a_, ns_b_;
    std::string if_a_, if_b_;
    std::optional<Child> relay_;
};

/// Deletes namespaces a RelayBed of a process that no longer exists left
/// behind (killed before its destructors ran): names carry the pid.
void remove_stale_netns();

/// CPU time of all of a process's threads, ns (/proc/<pid>/task/*/schedstat,
/// the scheduler's own runtime, finer than utime+stime's ticks).
Result<uint64_t, std::string> process_cpu_ns(pid_t pid);

/// rx bytes and packets of an interface, read in its namespace through
/// `ip netns exec` (sysfs shows the namespace of its mounter).
struct IfCounters {
    uint64_t rx_bytes = 0, rx_packets = 0;
};
Result<IfCounters, std::string> if_counters(const std::string& netns, const std::string& ifname);

struct IperfResult {
    uint16_t flows = 0;
    double gbps = 0;              ///< received, whole test
    uint64_t sent_bytes = 0;      ///< sender's end.sum_sent.bytes
    uint64_t received_bytes = 0;  ///< receiver's end.sum_received.bytes
    uint64_t retransmits = 0;
    double bytes_per_pkt = 0;     ///< B's interface: rx bytes / rx packets during the run
    double cpu_ns = -1;           ///< relay process CPU time (-1: veth, no relay)
    double cycles_per_byte = -1;  ///< cpu_ns × rdtsc rate / received bytes (-1: veth)
};

/// iperf3 TCP from A to B: `flows` parallel streams for `seconds`, or of
/// `bytes` in all when bytes != 0 (iperf3 -n).
Result<IperfResult, std::string> run_iperf3(RelayBed& bed, uint16_t flows, double seconds,
                                            uint64_t bytes = 0);

struct SockperfResult {
    double p50_us = 0, p99_us = 0, p999_us = 0, avg_us = 0;
    uint64_t observations = 0;
};

/// sockperf ping-pong of 64-byte messages, A → B, round-trip times (--full-rtt).
Result<SockperfResult, std::string> run_sockperf(RelayBed& bed, bool tcp, double seconds);

struct PingResult {
    double min_ms = 0, avg_ms = 0, max_ms = 0, mdev_ms = 0;
    uint32_t transmitted = 0, received = 0;
};

/// `ping -i interval_s -c count` from A to B.
Result<PingResult, std::string> run_ping(RelayBed& bed, uint32_t count, double interval_s = 0.01);

}  // namespace pvnet::bench
