// The backend device's knobs that every command running a VhostNet offers
// (pvnet relay, pvnet serve): vhost's weights, ethtool's coalescing,
// vhost's busyloop. One registration, so the options, their checks and
// their help read the same everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <vector>

#include "pvnet/backend/net_device.h"
#include "pvnet/notify/coalescer.h"

namespace pvnet::app {

struct BackendKnobs {
    // vhost's VHOST_NET_PKT_WEIGHT / VHOST_NET_WEIGHT per handler run (0: no limit).
    uint32_t tx_weight = backend::kPktWeight, rx_weight = backend::kPktWeight;
    uint32_t tx_weight_bytes = backend::kByteWeight, rx_weight_bytes = backend::kByteWeight;
    uint32_t tx_frames = 0, tx_usecs = 0, rx_frames = 0, rx_usecs = 0;
    uint32_t busyloop_usecs = 0;
    uint16_t workers = 1;  ///< VhostNetOptions::workers (0: one per queue pair)

    backend::Weight tx() const noexcept { return {tx_weight, tx_weight_bytes}; }
    backend::Weight rx() const noexcept { return {rx_weight, rx_weight_bytes}; }
    notify::CoalesceParams tx_coalesce() const noexcept { return {tx_frames, tx_usecs}; }
    notify::CoalesceParams rx_coalesce() const noexcept { return {rx_frames, rx_usecs}; }
};

struct BackendOptionHandles {
    std::vector<CLI::Option*> all;
    CLI::Option* busyloop = nullptr;
};

/// Registers --tx-frames, --tx-usecs, --rx-frames, --rx-usecs, --busyloop-usecs,
/// --tx-weight, --rx-weight, --tx-weight-bytes, --rx-weight-bytes, --workers on `cmd`.
BackendOptionHandles add_backend_options(CLI::App* cmd, BackendKnobs& k);

}  // namespace pvnet::app
