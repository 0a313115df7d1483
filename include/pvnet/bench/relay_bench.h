// The relay experiment's pieces (issue 5, seed 002): two namespaces joined
// either by a veth pair (the kernel's ceiling) or by a `pvnet relay` child
// process between two taps, and the kernel tools that measure the path —
// iperf3 (TCP throughput), sockperf (ping-pong latency), ping (rtt, both
// ways). Shared by `pvnet bench relay` and the relay integration tests;
// processes, namespaces and parsers come from the lab (pvnet/lab/).
//
// Namespace A holds 192.0.2.1/24 (the guest tap's side), B 192.0.2.2/24 (the
// host tap's side); each RelayBed makes its own uniquely named pair and
// deletes it, with its taps and relay, when dropped. Every wait is bounded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pvnet/lab/child.h"
#include "pvnet/lab/netns_bed.h"
#include "pvnet/lab/tool_output.h"
#include "pvnet/util/result.h"

namespace pvnet::bench {

/// One column of the experiment: a veth pair, or `pvnet relay` with flags.
struct RelayVariant {
    std::string name;
    bool veth = false;
    std::vector<std::string> relay_args;  ///< after `relay --guest-tap ... --host-netns ...`
    /// Two processes: tap B and the backend are a `pvnet serve --tap` child,
    /// the relay reaches it with --vhost-user (issue 14).
    bool two_process = false;
};

/// veth; plain (the plain tun relay), plain-nooff (the same without
/// offloads); or the ring relay in tx NAPI mode, "napi" plus, in this order,
/// any of "+at-rx" (tx completions reaped from rx NAPI), "+direct" (the
/// direct path, off otherwise), "+spin" (with +direct: spin 50 us for the
/// answer), "+coalesce" (tx interrupts coalesced, 64 frames / 64 us) and
/// "+vu" (two processes: the backend in `pvnet serve`, over vhost-user; not with +direct).
/// The relay's arguments are made from the name's parts, nothing else.
Result<RelayVariant, std::string> relay_variant(std::string_view name);

/// The namespaces' name prefix; lab::remove_stale_netns(kRelayNetnsPrefix)
/// removes those of dead runs.
inline constexpr const char* kRelayNetnsPrefix = "pvnet-relay-";

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

    const std::string& ns_a() const noexcept { return netns_->ns_a(); }
    const std::string& ns_b() const noexcept { return netns_->ns_b(); }
    const std::string& if_a() const noexcept { return if_a_; }
    const std::string& if_b() const noexcept { return if_b_; }
    /// The relay process (nullopt for veth).
    std::optional<pid_t> relay_pid() const noexcept;
    /// The two-process relay's backend, `pvnet serve` (nullopt otherwise).
    std::optional<pid_t> backend_pid() const noexcept;
    /// CPU time of the relay and its backend process, ns (0 for veth).
    Result<uint64_t, std::string> cpu_ns() const;
    /// The relay's command line as run (empty for veth).
    const std::vector<std::string>& relay_argv() const noexcept { return relay_argv_; }
    /// Stops the relay (then its backend) and returns the relay's output
    /// (its "final" counters line); empty for veth.
    std::string stop_relay();
    /// The two-process relay's backend output (its final lines once stopped).
    std::string backend_output() const { return backend_ ? backend_->output() : std::string(); }
    /// Writes a run-time command line to the relay's stdin and returns its
    /// reply ("<line>: ok" or "<line>: error: ..."), within 5 s.
    Result<std::string, std::string> relay_command(const std::string& line);

private:
    RelayBed() = default;

    // Declared before relay_: the relay stops before its namespaces go.
    std::optional<lab::NetnsBed> netns_;
    std::string if_a_, if_b_;
    std::vector<std::string> relay_argv_;
    std::optional<lab::Child> backend_;  ///< before relay_: stopped after it
    std::optional<lab::Child> relay_;
};

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

/// sockperf ping-pong of 64-byte messages, A → B, round-trip times (--full-rtt).
Result<lab::SockperfReport, std::string> run_sockperf(RelayBed& bed, bool tcp, double seconds);

/// Which namespace pings the other.
enum class PingFrom : uint8_t { A, B };

/// `ping -i interval_s -c count` from one namespace to the other. Losses are
/// a result (loss_pct), not an error; ping failing to run or its output
/// not parsing is.
Result<lab::PingReport, std::string> run_ping(RelayBed& bed, PingFrom from, uint32_t count,
                                              double interval_s);

}  // namespace pvnet::bench
