// VuLoop: pvnet's driver in this process, a back-end in another, joined by
// vhost-user (vhost_user::Frontend). The guest thread sends sequence-numbered
// frames (port::FrameGen) on tx and checks what comes back on rx
// (port::FrameSink): the back-end loops them (`pvnet serve --macswap`,
// testpmd's macswap). At most `window` frames are out at once, so a healthy
// loop drops nothing and the sink's counts say exactly what was lost.
//
// A vhost_user::Reconnector watches the connection; when the back-end goes
// away it reconnects, and the loop records how long traffic stopped:
// from the last frame back before the loss to the first after it. The guest
// thread runs on through the outage: its frames wait in the tx ring.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/pair/guest_pair.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/vhost_user/frontend.h"

namespace pvnet::bench {

struct VuLoopConfig {
    vhost_user::FrontendConfig fe;
    uint32_t frame_bytes = 64;
    uint16_t queue_size = 256;
    uint32_t window = 128;  ///< frames sent and not yet back, at most
    /// Reconnect when the back-end goes away (else traffic just stops).
    bool reconnect = true;
    /// Give up when a reconnect has not succeeded for this long.
    double reconnect_give_up_s = 30;
};

/// One outage: the back-end was lost, then served again.
struct VuOutage {
    double stopped_ms = 0;  ///< last frame back before the loss → first after
    double setup_ms = 0;    ///< loss seen → the new back-end set up
    bool recovered = false;
};

struct VuLoopResult {
    bool ok = false;  ///< no error, nothing corrupt, every frame accounted for
    std::string error;
    uint64_t features = 0;
    bool inflight = false;  ///< INFLIGHT_SHMFD was negotiated
    uint64_t sent = 0;
    port::SinkStats sink;   ///< after finish(sent): sent = pkts + lost - reordered
    uint64_t tx_ring_full = 0;
    uint64_t rx_bad_len = 0;  ///< used rx buffers shorter than a header (in-flight ones a restarted back-end returned empty)
    uint64_t losses = 0, reconnects = 0;
    std::vector<VuOutage> outages;
    double seconds = 0;
    double mpps = 0;  ///< frames back per second, whole run
};

class VuLoop {
public:
    /// Connects, negotiates, builds the driver for the negotiated features
    /// and starts the back-end; nullptr and `error` set on failure.
    static std::unique_ptr<VuLoop> create(const VuLoopConfig& cfg, std::string& error);
    ~VuLoop();
    VuLoop(const VuLoop&) = delete;
    VuLoop& operator=(const VuLoop&) = delete;

    /// Starts the guest and supervisor threads; the guest sends until
    /// `frames` have gone out (0: until finish()).
    void run(uint64_t frames);
    /// Frames back so far (any thread).
    uint64_t received() const noexcept { return sink_.stats().sink_pkts; }
    uint64_t reconnects() const noexcept { return reconnects_.load(std::memory_order_relaxed); }
    /// The guest is done sending (frames reached), or gave up.
    bool done() const noexcept { return done_.load(std::memory_order_relaxed); }
    /// Waits (at most `drain_s`) for the frames still out, stops the threads,
    /// and accounts every frame sent.
    VuLoopResult finish(double drain_s = 5);

    const vhost_user::Frontend& frontend() const noexcept { return *fe_; }
    /// ethtool -C through the back-end's control queue (negotiated where it offers one).
    Status<frontend::FrontendError> set_coalesce(notify::CoalesceParams rx,
                                                 notify::CoalesceParams tx) noexcept;

private:
    VuLoop(const VuLoopConfig& cfg, const port::FrameFormat& fmt);
    void guest_loop(uint64_t frames) noexcept;
    void on_lost();
    void on_done(bool ok, const std::string& why);

    VuLoopConfig cfg_;
    pair::GuestPair tb_;
    std::unique_ptr<vhost_user::Frontend> fe_;
    port::FrameGen gen_;
    port::FrameSink sink_;
    std::thread guest_;
    std::unique_ptr<vhost_user::Reconnector> reconnector_;
    std::atomic<bool> stop_{false}, done_{false};
    std::atomic<uint64_t> sent_{0}, reconnects_{0};
    /// Frames sent before the last reconnect never hold the window shut.
    std::atomic<uint64_t> window_floor_{0};
    std::atomic<uint64_t> last_rx_ns_{0};
    std::atomic<bool> recovered_{false};  ///< an outage awaits its first frame back
    std::mutex mu_;  ///< error_ and outages_
    std::string error_;
    std::vector<VuOutage> outages_;
    std::vector<uint64_t> outage_start_ns_;  ///< per outage: the last frame back before it
    uint64_t start_ns_ = 0;
    uint64_t lost_ns_ = 0;  ///< when the current outage was seen
};

}  // namespace pvnet::bench
