#include "backend_options.h"

#include "cli_checks.h"

namespace pvnet::app {

BackendOptionHandles add_backend_options(CLI::App* cmd, BackendKnobs& k) {
    using checks::Int;
    constexpr uint32_t kMaxUsecs = backend::kNotfCoalMaxUsecs;
    constexpr uint32_t kMaxFrames = backend::kNotfCoalMaxPackets;
    constexpr uint32_t kMaxWeight = 1'000'000;
    BackendOptionHandles h;
    h.all.push_back(
        cmd->add_option("--tx-frames", k.tx_frames, "tx completions per interrupt (0: off)")
            ->check(Int(0u, kMaxFrames, "0: off")));
    h.all.push_back(cmd->add_option("--tx-usecs", k.tx_usecs, "tx interrupt delay, us (0: off)")
                        ->check(Int(0u, kMaxUsecs, "0: off")));
    h.all.push_back(cmd->add_option("--rx-frames", k.rx_frames, "rx packets per interrupt (0: off)")
                        ->check(Int(0u, kMaxFrames, "0: off")));
    h.all.push_back(cmd->add_option("--rx-usecs", k.rx_usecs, "rx interrupt delay, us (0: off)")
                        ->check(Int(0u, kMaxUsecs, "0: off")));
    h.busyloop = cmd->add_option("--busyloop-usecs", k.busyloop_usecs,
                                 "event mode: the backend spins on the rings this long before "
                                 "sleeping, us")
                     ->check(Int(0u, kMaxUsecs));
    h.all.push_back(h.busyloop);
    h.all.push_back(
        cmd->add_option("--tx-weight", k.tx_weight, "handle_tx packets per run (0: no limit)")
            ->check(Int(0u, kMaxWeight, "0: no limit")));
    h.all.push_back(
        cmd->add_option("--rx-weight", k.rx_weight, "handle_rx packets per run (0: no limit)")
            ->check(Int(0u, kMaxWeight, "0: no limit")));
    h.all.push_back(cmd->add_option("--tx-weight-bytes", k.tx_weight_bytes,
                                    "handle_tx bytes per run (0: no limit)")
                        ->check(Int(0u, UINT32_MAX, "0: no limit")));
    h.all.push_back(cmd->add_option("--rx-weight-bytes", k.rx_weight_bytes,
                                    "handle_rx bytes per run (0: no limit)")
                        ->check(Int(0u, UINT32_MAX, "0: no limit")));
    h.all.push_back(cmd->add_option("--workers", k.workers,
                                    "backend worker threads, queue pair i on worker i % N (0: one "
                                    "per queue pair, as Linux opens a vhost-net device per pair)")
                        ->check(Int(uint16_t{0}, uint16_t{64}, "0: one per pair")));
    return h;
}

}  // namespace pvnet::app
