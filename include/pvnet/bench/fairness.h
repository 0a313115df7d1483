// The fairness experiment of seed 001: the backend floods the rx ring with
// 64-byte frames while the guest sends its own steady, paced tx stream, both
// handlers on one worker. Without an rx packet weight, handle_rx keeps the
// worker until its byte weight (or an empty ring) and tx waits; with it, tx
// gets a turn every kPktWeight rx packets. Measured: tx throughput and the
// latency from the guest's send to handle_tx handing the frame to the port.
#pragma once

#include <cstdint>
#include <string>

#include "pvnet/backend/vhost_net.h"

namespace pvnet::bench {

struct FairnessConfig {
    uint16_t queue_size = 256;
    backend::Weight rx_weight;
    backend::Weight tx_weight;
    backend::RunMode mode = backend::RunMode::Event;
    bool event_idx = true;
    uint32_t tx_pps = 20'000;  ///< the guest's paced stream
    uint32_t frame_bytes = 64; ///< flood and stream alike
    double warmup_s = 0.2;
    double seconds = 1.0;
    int backend_cpu = 0;
    int frontend_cpu = 1;
};

struct FairnessResult {
    bool ok = false;
    std::string error;
    double window_s = 0;
    double tx_offered_pps = 0;   ///< frames the guest sent in the window, per second
    double tx_delivered_pps = 0; ///< frames handle_tx handed to the sink in the window
    double rx_mpps = 0;          ///< flood frames the guest received, Mpps
    double lat_p50_us = 0, lat_p99_us = 0, lat_max_us = 0;  ///< send → handle_tx
    uint64_t tx_sent = 0, tx_delivered = 0, tx_lost = 0, tx_corrupt = 0;
    uint64_t tx_stalls = 0;      ///< sends skipped: no free guest buffer
    double rx_requeue_per_kpkt = 0;
};

FairnessResult run_fairness(const FairnessConfig& cfg) noexcept;

}  // namespace pvnet::bench
