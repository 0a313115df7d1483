// Seed 003's experiment (XPS by rx queue) in one process. A guest device of
// N queue pairs runs T server threads (the seed's memcached); a client behind
// the backend sends requests over many UDP flows, open loop. The guest's RSS
// (VIRTIO_NET_CTRL_MQ_RSS_CONFIG: Toeplitz, Linux's default round-robin
// indirection table) spreads the flows over the rx queues. Per rx queue a
// NAPI thread, pinned where virtnet_set_affinity puts that queue's
// interrupt, hands each request to a server thread chosen by the rx queue
// (the seed's memcached picks a connection's thread by SO_INCOMING_NAPI_ID:
// threads q, q + N, ... serve queue q, a flow always the same one); the flow
// records its rx queue (sk_rx_queue_mapping). Threads are not pinned unless
// asked: the seed's case, where a thread runs wherever the scheduler puts it. The thread answers on the tx
// queue XPS picks (VirtioNet::pick_tx): Default has only xps_cpus
// (virtnet_set_affinity's groups), so the sending thread's CPU decides;
// Symmetric adds xps_rxqs i → i, so the flow's rx queue decides.
//
// The guest's queue pair is guarded by one lock, taken by its NAPI thread
// (rx poll and refill) and by every thread transmitting on it (the tx lock
// Linux's virtnet_poll_cleantx also takes from rx NAPI).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace pvnet::bench {

enum class XpsVariant : uint8_t {
    Default,    ///< xps_cpus from virtnet_set_affinity, no xps_rxqs
    Symmetric,  ///< + xps_rxqs: rx queue i → tx queue i
};

const char* to_string(XpsVariant v) noexcept;

struct XpsBenchConfig {
    XpsVariant variant = XpsVariant::Default;
    uint16_t queue_pairs = 2;
    uint16_t threads = 4;
    /// Server thread t pinned to CPU t % ncpu; false: the scheduler places them.
    bool pin_threads = false;
    uint16_t flows = 64;
    uint32_t rate = 20000;  ///< offered requests/s, open loop
    uint32_t frame_bytes = 64;
    uint32_t server_ns = 0;  ///< work per request (a spin), ns
    uint16_t queue_size = 256;
    double warmup_s = 0.2;
    double seconds = 1.0;
};

struct XpsQueueResult {
    uint64_t steered = 0;        ///< requests RSS sent to this rx queue
    uint64_t rx_pkts = 0;        ///< guest rx
    uint64_t tx_pkts = 0;        ///< guest tx (replies that left on this queue)
    uint64_t rx_interrupts = 0;  ///< NAPI wakeups by the rx call
    uint64_t napi_polls = 0;
    uint64_t tx_completions = 0;
};

struct XpsThreadResult {
    std::vector<uint64_t> txq_used;  ///< replies per tx queue
    uint64_t rxq_mismatch = 0;       ///< replies whose tx queue was not the flow's rx queue
    std::array<uint64_t, 3> by_rule{};  ///< replies per deciding rule (frontend::XpsRule)
    double cpu_s = 0;                ///< thread CPU time, whole run
};

struct XpsBenchResult {
    bool ok = false;
    std::string error;
    double window_s = 0;
    double offered_per_s = 0;
    double achieved_per_s = 0;  ///< replies received per second
    // Latency from each request's planned send time, µs (window only).
    double rtt_min_us = 0, rtt_avg_us = 0, rtt_max_us = 0, p50_us = 0, p99_us = 0;
    double interrupts_per_s = 0;    ///< backend calls written, rx + tx, every pair
    double ctx_switches_per_s = 0;  ///< getrusage(RUSAGE_SELF): voluntary + involuntary
    /// Thread CPU time of the backend worker, NAPI and server threads (not
    /// the client) × the rdtsc rate / replies.
    double cycles_per_req = 0;
    double same_queue_share = 0;  ///< replies on the queue their request came in on
    // Whole run (after the drain).
    uint64_t sent = 0, answered = 0, unmatched = 0, abandoned = 0;
    uint64_t backlog_end = 0;      ///< requests due but not sent when the window closed
    uint64_t drop_sock_full = 0;   ///< a server thread's socket queue was full
    uint64_t drop_no_buf = 0;      ///< no guest tx buffer or descriptor for a reply
    uint64_t drop_bad_reply = 0;   ///< the client port could not parse a reply
    std::vector<XpsQueueResult> queues;
    std::vector<XpsThreadResult> threads;
};

XpsBenchResult run_xps_bench(const XpsBenchConfig& cfg) noexcept;

/// The same comparison through real sockets: `pvnet relay --queues 2` (its
/// guest threads free, XPS on: `--xps` for Default, `--symmetric`) between
/// two namespaces (RelayBed), a `pvnet udp-rr server` of cfg.threads threads
/// (SO_INCOMING_CPU steering, or the hash when !cfg.pin_threads) behind tap
/// A, and a `pvnet udp-rr client` of cfg.flows flows in netns B at cfg.rate
/// for cfg.seconds. Each run builds its own bed (`tag` names it), so no run
/// inherits another's tun flow tables. What it reads: the client's latency
/// and counts; the relay's final line (interrupts, per-queue frames, per
/// thread XPS outcomes); context switches system-wide (/proc/stat ctxt);
/// cycles per request from the relay's and the server's CPU time
/// (schedstat) × the rdtsc rate. server_ns, queue_size and frame_bytes
/// other than 64 are not used.
XpsBenchResult run_xps_relay_bench(const XpsBenchConfig& cfg, const std::string& pvnet_exe,
                                   const std::string& tag) noexcept;

}  // namespace pvnet::bench
