// The PVP experiment (physical → virtual → physical), as seed 001's test
// runs it: a backend-side generator floods frames into the rx ring
// (handle_rx), the guest forwards each frame back out of its tx queue (io
// forwarding), handle_tx hands it to a sink that checks order, loss and
// payload. Both handlers share one worker thread, so the packet and byte
// weights decide how the worker's time splits between rx and tx.
#pragma once

#include <cstdint>
#include <string>

#include "pvnet/backend/vhost_net.h"

namespace pvnet::bench {

/// Where the backend runs: a worker thread of this process, or a `pvnet
/// serve --gen-loop` process behind vhost-user (issue 14): the same
/// generator, sink and weights, the guest's forwarding loop unchanged.
enum class PvpTransport : uint8_t { InProcess, VhostUser };

struct PvpConfig {
    PvpTransport transport = PvpTransport::InProcess;
    std::string pvnet_exe;     ///< runs `serve` for VhostUser (the bench passes its own path)
    uint32_t frame_bytes = 64;
    uint16_t queue_size = 256;
    backend::Weight weight;     ///< handle_rx's weight
    backend::Weight tx_weight;  ///< handle_tx's weight
    backend::RunMode mode = backend::RunMode::Event;
    bool event_idx = true;
    double warmup_s = 0.2;
    double seconds = 1.0;      ///< measured window
    uint64_t frames = 0;       ///< if non-zero: stop after this many frames instead
    /// The guest takes from rx only what its tx ring has room for, so a full
    /// tx ring backs up into rx and throttles the flood: no drops (tests).
    /// Off: testpmd's io forwarding, which drops what tx cannot take.
    bool backpressure = false;
    int backend_cpu = 0;       ///< -1: not pinned
    int frontend_cpu = 1;
};

struct PvpResult {
    bool ok = false;           ///< no queue broke and every frame is accounted for
    std::string error;
    // Whole run (warm-up, window and drain).
    uint64_t generated = 0;
    uint64_t delivered = 0;    ///< frames the sink accepted
    uint64_t drop_tx_full = 0; ///< guest forward found its tx ring full
    uint64_t drop_other = 0;   ///< any other counted drop
    uint64_t lost = 0, corrupt = 0, reordered = 0, duplicates = 0;
    // Per stage, whole run (after the drain): the device's and the guest's
    // counters, so each hop's frames in = frames out + drops can be checked.
    uint64_t be_rx = 0;            ///< backend rx_pkts: into guest buffers
    uint64_t be_rx_no_room = 0;    ///< backend rx_drop_no_room: taken from the port, not delivered
    uint64_t be_rx_bad_chain = 0;  ///< backend rx_drop_bad_chain (chains; the frame stays)
    uint64_t guest_rx = 0;         ///< guest rx_pkts: used entries reaped
    uint64_t guest_rx_bad_len = 0; ///< ... shorter than a header (the 0-length ones)
    uint64_t guest_rx_multi_buf = 0;  ///< ... of several buffers on the single-buffer path
    uint64_t guest_tx = 0;         ///< guest tx_pkts: frames forwarded onto tx
    uint64_t be_tx = 0;            ///< backend tx_pkts: taken by the sink
    uint64_t be_tx_bad_chain = 0, be_tx_port = 0, be_tx_retry = 0;
    // Measured window.
    double window_s = 0;
    double mpps = 0;           ///< frames delivered per second / 1e6 (VhostUser: frames the
                               ///< guest forwarded, the sink being in the other process)
    double backend_cpu_ns_per_pkt = 0;   ///< thread CPU time (VhostUser: serve's whole process)
    double frontend_cpu_ns_per_pkt = 0;
    double backend_cycles_per_pkt = 0;   ///< CPU time × rdtsc rate
    double frontend_cycles_per_pkt = 0;
    double kicks_per_pkt = 0;            ///< rx + tx doorbells written by the guest
    double interrupts_per_pkt = 0;       ///< rx + tx calls written by the backend
    double rx_requeue_per_kpkt = 0;      ///< weight requeues per 1000 packets
    double tx_requeue_per_kpkt = 0;
    uint64_t rx_max_run_pkts = 0, tx_max_run_pkts = 0;
};

/// Runs one PVP measurement. Never throws.
PvpResult run_pvp(const PvpConfig& cfg) noexcept;

/// TSC ticks per nanosecond, calibrated once against CLOCK_MONOTONIC.
double tsc_per_ns() noexcept;

}  // namespace pvnet::bench
