// udp-rr: a multi-threaded UDP request/response tool over the host stack,
// for the steering experiments of issue 12 (which socket, thread and CPU a
// flow's requests end on).
//
// Server: T threads, one SO_REUSEPORT socket each on the same address. With
// `incoming-cpu` steering thread i is pinned to a CPU and its socket says so
// with SO_INCOMING_CPU, so the kernel's reuseport selection
// (reuseport_select_sock_by_hash's incoming_cpu pass) hands a packet to the
// socket of the CPU that received it; with `hash` the flow hash alone picks.
// Each request is echoed at its own size with the server's header filled in.
//
// Client: F connected sockets (one source port per flow) on N threads, an
// open-loop schedule at R requests/s in total, round robin over the flows,
// latency from each request's planned send time (open_loop.h).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::bench {

// --- The datagram header --------------------------------------------------
//
// Both ends are this program; fields are little-endian at fixed offsets,
// written and read with memcpy, never cast over the bytes.
//   0  magic          u32  kUdpRrMagic
//   4  flow           u32  the client's flow index
//   8  seq            u64  per-flow sequence number, +1 per request
//  16  server_thread  u16  filled by the server (0xffff in a request)
//  18  server_cpu     u16  sched_getcpu() of the answering thread
//  20  incoming_cpu   i32  SO_INCOMING_CPU of the socket after the receive
// The rest of the datagram is padding up to the request size.

inline constexpr uint32_t kUdpRrMagic = 0x52525650;  // "PVRR"
inline constexpr uint32_t kUdpRrHdrBytes = 24;
/// The largest UDP payload over IPv4 (65535 - 20 - 8).
inline constexpr uint32_t kUdpRrMaxBytes = 65507;
/// Server threads a reply may name (and a server may have).
inline constexpr uint16_t kUdpRrMaxThreads = 256;
inline constexpr uint16_t kUdpRrNoThread = 0xffff;

struct UdpRrHeader {
    uint32_t magic = kUdpRrMagic;
    uint32_t flow = 0;
    uint64_t seq = 0;
    uint16_t server_thread = kUdpRrNoThread;
    uint16_t server_cpu = 0;
    int32_t incoming_cpu = -1;
};

/// Writes `h` into the first kUdpRrHdrBytes of `dgram` (which has room).
void udp_rr_encode(const UdpRrHeader& h, std::span<std::byte> dgram) noexcept;
/// Reads the header of a received datagram; false when it is too short.
bool udp_rr_decode(std::span<const std::byte> dgram, UdpRrHeader& h) noexcept;

// --- Server ---------------------------------------------------------------

enum class UdpRrSteer : uint8_t {
    IncomingCpu,  ///< thread i pinned to the i-th allowed CPU, SO_INCOMING_CPU set to it
    Hash,         ///< plain SO_REUSEPORT: the 4-tuple hash picks the socket
};

const char* to_string(UdpRrSteer s) noexcept;

struct UdpRrServerConfig {
    std::array<uint8_t, 4> ip{127, 0, 0, 1};
    uint16_t port = 0;  ///< 0: the kernel picks one (UdpRrServer::port())
    uint16_t threads = 1;
    UdpRrSteer steer = UdpRrSteer::Hash;
};

/// One server thread's counters (one writer: that thread).
struct UdpRrServerThreadCounters {
    Counter requests;           ///< datagrams received
    Counter replies;            ///< replies sent
    Counter rx_drop_short;      ///< shorter than the header
    Counter rx_drop_bad_magic;  ///< not a udp-rr request
    Counter tx_drop_error;      ///< sendmmsg refused the reply (ENOBUFS, EAGAIN, ...)
    /// Requests that arrived on a CPU other than the one the thread ran on
    /// (SO_INCOMING_CPU after the batch vs sched_getcpu: per batch, the
    /// CPU of its last packet).
    Counter incoming_cpu_mismatch;
    std::atomic<uint64_t> cpu_ns{0};  ///< the thread's CPU time, at its end
};

/// A snapshot of one thread's counters, with their names in one table.
struct UdpRrServerThreadStats {
    uint16_t thread = 0;
    int cpu = -1;  ///< the pinned CPU; -1 with hash steering
    uint64_t requests = 0, replies = 0, rx_drop_short = 0, rx_drop_bad_magic = 0, tx_drop_error = 0,
             incoming_cpu_mismatch = 0, cpu_ns = 0;

    /// The name table: f(name, member pointer) for every counter, in report order.
    template <typename F>
    static void fields(F&& f) {
        f("requests", &UdpRrServerThreadStats::requests);
        f("replies", &UdpRrServerThreadStats::replies);
        f("rx_drop_short", &UdpRrServerThreadStats::rx_drop_short);
        f("rx_drop_bad_magic", &UdpRrServerThreadStats::rx_drop_bad_magic);
        f("tx_drop_error", &UdpRrServerThreadStats::tx_drop_error);
        f("incoming_cpu_mismatch", &UdpRrServerThreadStats::incoming_cpu_mismatch);
        f("cpu_ns", &UdpRrServerThreadStats::cpu_ns);
    }
    /// f(name, value) for every counter.
    template <typename F>
    void for_each(F&& f) const {
        fields([&](const char* name, auto m) { f(name, this->*m); });
    }
    /// Adds another thread's counters (a total over threads).
    UdpRrServerThreadStats& operator+=(const UdpRrServerThreadStats& o) noexcept {
        fields([&](const char*, auto m) { this->*m += o.*m; });
        return *this;
    }
};

class UdpRrServer {
public:
    /// Binds every socket, then starts the threads. The error names the
    /// failing call ("bind: Address already in use").
    static Result<std::unique_ptr<UdpRrServer>, std::string> start(
        const UdpRrServerConfig& cfg) noexcept;
    ~UdpRrServer();
    UdpRrServer(const UdpRrServer&) = delete;
    UdpRrServer& operator=(const UdpRrServer&) = delete;

    uint16_t port() const noexcept { return port_; }
    /// Live counters of every thread (the threads keep writing).
    std::vector<UdpRrServerThreadStats> stats() const;
    /// Stops and joins the threads (within one poll timeout); idempotent.
    void stop() noexcept;

private:
    struct Worker;
    explicit UdpRrServer(uint16_t port);
    void run(Worker& w) noexcept;

    uint16_t port_;
    std::atomic<bool> stop_{false};
    std::vector<std::unique_ptr<Worker>> workers_;
};

// --- Client ---------------------------------------------------------------

struct UdpRrClientConfig {
    std::array<uint8_t, 4> server_ip{127, 0, 0, 1};
    uint16_t server_port = 0;
    uint32_t flows = 1;
    uint64_t rate_per_s = 1000;  ///< total over all flows, > 0
    double duration_s = 1.0;     ///< the sending window
    uint32_t size_bytes = 64;    ///< request and reply, kUdpRrHdrBytes..kUdpRrMaxBytes
    uint16_t threads = 1;        ///< flows are dealt to threads round robin
    /// After the window: how long to wait for the replies still outstanding.
    double drain_s = 1.0;
};

/// The client's counts, with their names in one table.
struct UdpRrClientCounts {
    uint64_t planned = 0;  ///< requests the schedule planned in the window
    uint64_t sent = 0;
    uint64_t received = 0;     ///< replies matched to an outstanding request
    uint64_t lost = 0;         ///< sent and never answered (abandoned included)
    uint64_t abandoned = 0;    ///< given up while the window ran (slot reused)
    uint64_t backlog_end = 0;  ///< planned in the window, not sent by its end
    uint64_t tx_error = 0;     ///< send failed other than EAGAIN (ECONNREFUSED, ...)
    uint64_t rx_refused = 0;   ///< ICMP port unreachable came back: nothing serves the port
    // Replies refused, by reason: each counted, none used.
    uint64_t rx_bad_size = 0;  ///< not the request size (short ones included)
    uint64_t rx_bad_magic = 0;
    uint64_t rx_bad_flow = 0;    ///< names another flow than the socket's
    uint64_t rx_bad_seq = 0;     ///< names no outstanding request (duplicate, stale, forged)
    uint64_t rx_bad_thread = 0;  ///< server thread >= kUdpRrMaxThreads
    /// Replies whose incoming_cpu differs from the CPU that answered.
    uint64_t incoming_cpu_mismatch = 0;

    uint64_t rx_bad() const noexcept {
        return rx_bad_size + rx_bad_magic + rx_bad_flow + rx_bad_seq + rx_bad_thread;
    }
    /// The name table: f(name, member pointer) for every count, in report order.
    template <typename F>
    static void fields(F&& f) {
        using C = UdpRrClientCounts;
        f("planned", &C::planned);
        f("sent", &C::sent);
        f("received", &C::received);
        f("lost", &C::lost);
        f("abandoned", &C::abandoned);
        f("backlog_end", &C::backlog_end);
        f("tx_error", &C::tx_error);
        f("rx_refused", &C::rx_refused);
        f("rx_bad_size", &C::rx_bad_size);
        f("rx_bad_magic", &C::rx_bad_magic);
        f("rx_bad_flow", &C::rx_bad_flow);
        f("rx_bad_seq", &C::rx_bad_seq);
        f("rx_bad_thread", &C::rx_bad_thread);
        f("incoming_cpu_mismatch", &C::incoming_cpu_mismatch);
    }
    /// f(name, value) for every count.
    template <typename F>
    void for_each_count(F&& f) const {
        fields([&](const char* name, auto m) { f(name, this->*m); });
    }
    /// Adds another thread's counts.
    UdpRrClientCounts& operator+=(const UdpRrClientCounts& o) noexcept {
        fields([&](const char*, auto m) { this->*m += o.*m; });
        return *this;
    }
};

struct UdpRrClientResult : UdpRrClientCounts {
    bool ok = false;
    std::string error;
    double offered_per_s = 0;   ///< the schedule's rate
    double sent_per_s = 0;      ///< requests sent / window
    double achieved_per_s = 0;  ///< replies matched / (start .. last reply)
    double lat_min_us = 0, lat_avg_us = 0, lat_max_us = 0;
    double lat_p50_us = 0, lat_p99_us = 0, lat_p999_us = 0;
    /// Matched replies by the server thread (and CPU) that sent them, up to
    /// the highest one seen.
    std::vector<uint64_t> replies_by_server_thread;
    std::vector<uint64_t> replies_by_server_cpu;

    /// f(name, value) for every rate and latency, in report order.
    template <typename F>
    void for_each_figure(F&& f) const {
        f("offered_per_s", offered_per_s);
        f("sent_per_s", sent_per_s);
        f("achieved_per_s", achieved_per_s);
        f("lat_min_us", lat_min_us);
        f("lat_avg_us", lat_avg_us);
        f("lat_p50_us", lat_p50_us);
        f("lat_p99_us", lat_p99_us);
        f("lat_p999_us", lat_p999_us);
        f("lat_max_us", lat_max_us);
    }
};

/// Runs the client to the end of the window and the drain. Source ports
/// are the kernel's (one ephemeral port per flow).
UdpRrClientResult run_udp_rr_client(const UdpRrClientConfig& cfg) noexcept;

}  // namespace pvnet::bench
