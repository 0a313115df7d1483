// The stream and request/response experiments of seed 000 (virtio-net tx
// napi): N flows of the guest send to a server behind the backend.
// Stream: each flow sends 64 KiB messages cut into 1514-byte frames as fast
// as its send credit allows; the server answers every second frame with a
// 64-byte ACK (the return path whose rx interrupts at-rx cleaning rides on).
// RR: each flow keeps one 64-byte request outstanding (closed loop) or the
// flows share an open-loop schedule at a fixed total rate (OpenLoopSchedule:
// latency from the planned send time); the server answers each one.
// Variants: the seed's five columns.
#pragma once

#include <cstdint>
#include <string>

namespace pvnet::bench {

enum class Workload : uint8_t { Stream, Rr };

enum class TxVariant : uint8_t {
    Upstream,          ///< free-on-xmit, skbs orphaned
    Napi,              ///< tx napi, credit on completion
    NapiCoalesce,      ///< + backend tx coalescing 64 frames / 64 us (the seed's vhost patch)
    NapiAtRx,          ///< + tx cleaning from rx napi
    NapiCoalesceAtRx,  ///< + both
};

const char* to_string(TxVariant v) noexcept;

struct StreamRrConfig {
    Workload workload = Workload::Stream;
    TxVariant variant = TxVariant::Napi;
    uint16_t flows = 1;
    uint32_t rr_rate = 0;          ///< RR: total requests/s, open loop; 0 = closed loop
    uint32_t sndbuf_bytes = 131072;
    /// The +coalesce variants' limits, in ethtool -C's words: tx-* on the tx
    /// queue's completions (the seed's setting), rx-* on received packets
    /// (0/0: off).
    uint32_t tx_frames = 64, tx_usecs = 64;
    uint32_t rx_frames = 0, rx_usecs = 0;
    uint32_t busyloop_usecs = 0;   ///< backend (vhost busyloop_timeout)
    /// handle_tx's packet weight: how many tx packets the worker moves (and
    /// completes) before it serves rx, i.e. before the ACKs for them exist.
    uint32_t tx_weight_pkts = 256;
    /// The server's work per received frame (EchoPort::set_work_ns), ns.
    uint32_t server_ns = 0;
    uint32_t busy_poll_usecs = 0;  ///< guest (net.core.busy_poll)
    uint16_t queue_size = 256;
    double warmup_s = 0.2;
    /// The measured window: until `work` is done (stream: payload bytes the
    /// server received; RR: responses), at most `seconds`; 0: `seconds`.
    uint64_t work = 0;
    double seconds = 1.0;
    int backend_cpu = 0;
    int frontend_cpu = 1;
};

struct StreamRrResult {
    bool ok = false;
    std::string error;
    double window_s = 0;
    double goodput_gbps = 0;     ///< stream: UDP payload the server received, Gbit/s
    double frame_gbps = 0;       ///< ... Ethernet frames (no virtio header), Gbit/s
    uint64_t work = 0;           ///< payload bytes (stream) or responses (RR) in the window
    bool work_completed = false; ///< config.work was reached within config.seconds
    double gcycles = 0;          ///< both threads' cycles in the window (seed 000's unit)
    double trans_per_s = 0;      ///< RR: responses received per second
    double pkts_per_s = 0;       ///< frames the guest sent per second (RR: achieved request rate)
    double offered_per_s = 0;    ///< RR open loop: the planned request rate; 0: closed loop
    uint64_t backlog_end = 0;    ///< open loop: requests due but not sent when the window closed
    uint64_t rr_unmatched = 0;   ///< responses that named no outstanding request
    uint64_t rr_abandoned = 0;   ///< requests never answered (their slot was reused)
    uint32_t max_outstanding = 0;  ///< RR: most requests of one flow outstanding at once
    double p50_us = 0, p99_us = 0;  ///< RR: planned send → response; stream: 0
    /// RR open loop: actual - planned send time (the generator's own delay,
    /// part of p50/p99).
    double send_lag_p50_us = 0, send_lag_p99_us = 0;
    double cycles_per_pkt = 0;   ///< both threads: CPU time × rdtsc rate / frames sent
    double bytes_per_pkt = 0;    ///< guest tx bytes / frames
    double interrupts_per_s = 0; ///< backend calls written (rx + tx)
    double kicks_per_s = 0;      ///< guest kicks written (rx + tx)
    double tx_interrupts_per_s = 0;
    double tx_reaped_at_rx = 0;  ///< share of tx completions reaped by rx NAPI (at-rx)
    double coalesce_timer_fires_per_s = 0;
    double busy_poll_hits_per_s = 0;  ///< backend + guest spins that found work
    // Whole run, per hop (after the drain): frames in = out + drops by reason.
    uint64_t guest_tx = 0;          ///< guest tx_pkts: requests queued on tx
    uint64_t tx_in_flight = 0;      ///< ... not consumed when the worker stopped
    uint64_t be_tx = 0;             ///< backend tx_pkts: taken by the server
    uint64_t be_tx_bad_chain = 0, be_tx_port = 0, be_tx_retry = 0;
    uint64_t srv_requests = 0, srv_drop_bad_request = 0, srv_retry = 0;
    uint64_t srv_unanswered = 0;    ///< requests answered by no response (by design)
    uint64_t srv_responses = 0, srv_drop_no_room = 0;
    uint64_t srv_pending = 0;       ///< responses queued, never received
    uint64_t be_rx = 0, be_rx_no_room = 0, be_rx_bad_chain = 0;
    uint64_t guest_rx = 0, guest_rx_bad_len = 0, guest_rx_length_errors = 0;
    uint64_t sndbuf_stalls = 0;      ///< whole run, warm-up included
    double sndbuf_stall_ms = 0;      ///< whole run
    double sndbuf_stalls_per_s = 0;  ///< in the measured window
};

StreamRrResult run_stream_rr(const StreamRrConfig& cfg) noexcept;

}  // namespace pvnet::bench
