// The vhost-user loop (vu_loop.h): a guest thread moving checked frames, a
// supervisor reconnecting a lost back-end.
#include "pvnet/bench/vu_loop.h"

#include <algorithm>
#include <cstring>

#include "pvnet/util/clock.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::bench {

namespace {
constexpr uint32_t kBudget = 64;
}  // namespace

VuLoop::VuLoop(const VuLoopConfig& cfg, const port::FrameFormat& fmt)
    : cfg_(cfg), gen_(fmt), sink_(fmt) {}

VuLoop::~VuLoop() {
    stop_.store(true);
    if (guest_.joinable()) guest_.join();
    reconnector_.reset();
}

std::unique_ptr<VuLoop> VuLoop::create(const VuLoopConfig& cfg, std::string& error) {
    auto fmt = port::FrameFormat::create(cfg.frame_bytes);
    if (!fmt) {
        error = std::string(port::to_string(fmt.error()));
        return nullptr;
    }
    std::unique_ptr<VuLoop> l(new VuLoop(cfg, *fmt));
    auto fe = vhost_user::Frontend::create(cfg.fe);
    if (!fe) {
        error = fe.error();
        return nullptr;
    }
    l->fe_ = std::move(*fe);
    using namespace virtio;
    // The control queue where the back-end offers its own (serve --ctrl-vq).
    const uint64_t ctrl = feature_mask(VIRTIO_NET_F_CTRL_VQ) | feature_mask(VIRTIO_NET_F_NOTF_COAL);
    const uint64_t wanted =
        feature_mask(VIRTIO_F_VERSION_1) | feature_mask(VIRTIO_RING_F_EVENT_IDX) | ctrl;
    auto f = l->fe_->connect(wanted, ctrl);
    if (!f) {
        error = f.error().text;
        return nullptr;
    }
    frontend::VirtioNetConfig fc;
    fc.rx_size = fc.tx_size = cfg.queue_size;
    fc.event_idx = has_feature(*f, VIRTIO_RING_F_EVENT_IDX);
    fc.ctrl_vq = (*f & ctrl) == ctrl;
    if (auto err = l->tb_.setup(fc)) {
        error = *err;
        return nullptr;
    }
    const mem::MemoryRegion& r = l->tb_.guest_region();
    const vhost_user::GuestMemory gm{r.fd(), pair::kGuestBase, r.size(), r.host()};
    if (auto s = l->fe_->start(l->tb_.device_setup(), gm); !s) {
        error = s.error().text;
        return nullptr;
    }
    return l;
}

void VuLoop::run(uint64_t frames) {
    start_ns_ = now_ns();
    last_rx_ns_.store(start_ns_);
    guest_ = std::thread([this, frames] { guest_loop(frames); });
    if (cfg_.reconnect) {
        vhost_user::Reconnector::Hooks h;
        h.lost = [this] { on_lost(); };
        h.done = [this](bool ok, const std::string& why) { on_done(ok, why); };
        reconnector_ = std::make_unique<vhost_user::Reconnector>(*fe_, cfg_.reconnect_give_up_s,
                                                                 std::move(h));
    }
}

void VuLoop::guest_loop(uint64_t frames) noexcept {
    frontend::QueuePair& qp = tb_.qp();
    const uint32_t hdr = tb_.fe().hdr_bytes();
    const uint32_t len = hdr + gen_.frame_bytes();
    qp.try_fill_recv();
    uint64_t sent = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
        qp.free_old_xmit();
        const uint64_t floor = std::max(sink_.expected_seq(), window_floor_.load(std::memory_order_relaxed));
        uint32_t n = 0;
        while (n < kBudget && (frames == 0 || sent < frames) && sent - std::min(sent, floor) < cfg_.window) {
            uint32_t id = 0;
            if (!qp.alloc_buf(id)) break;
            std::byte* b = qp.buf_host(id);
            std::memset(b, 0, hdr);
            gen_.write_frame(sent, b + hdr, qp.buf_bytes() - hdr);
            if (!qp.xmit(id, len)) break;  // counted (tx_drop_ring_full); the seq is lost
            ++sent;
            ++n;
        }
        sent_.store(sent, std::memory_order_relaxed);
        if (n != 0) qp.tx_flush();
        if (frames != 0 && sent >= frames) done_.store(true, std::memory_order_relaxed);
        const uint32_t r = qp.poll_rx(kBudget, [&](uint32_t id, std::byte* p, uint32_t l) {
            (void)sink_.check_frame(p + hdr, l - std::min(l, hdr));
            qp.free_buf(id);
            return true;
        });
        if (r != 0) {
            const uint64_t t = now_ns();
            last_rx_ns_.store(t, std::memory_order_relaxed);
            // A plain load first: the exchange (a locked RMW) only once an outage ended.
            if (recovered_.load(std::memory_order_relaxed) &&
                recovered_.exchange(false, std::memory_order_acquire)) {
                std::lock_guard lock(mu_);
                for (std::size_t k = 0; k < outages_.size(); ++k) {
                    if (outages_[k].recovered && outages_[k].stopped_ms == 0) {
                        outages_[k].stopped_ms =
                            static_cast<double>(t - outage_start_ns_[k]) / 1e6;
                    }
                }
            }
        }
        qp.try_fill_recv();
        if (n == 0 && r == 0 && qp.napi_complete()) qp.wait_rx(1000);
    }
}

void VuLoop::on_lost() {
    // Frames the dead back-end held never come back: they must not close the window.
    window_floor_.store(sent_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    outages_.push_back({});
    outage_start_ns_.push_back(last_rx_ns_.load(std::memory_order_relaxed));
    lost_ns_ = now_ns();
}

void VuLoop::on_done(bool ok, const std::string& why) {
    std::lock_guard lock(mu_);
    if (!ok) {
        error_ = "no back-end to reconnect to: " + why;
        return;
    }
    window_floor_.store(sent_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    reconnects_.fetch_add(1, std::memory_order_relaxed);
    outages_.back().recovered = true;
    outages_.back().setup_ms = static_cast<double>(now_ns() - lost_ns_) / 1e6;
    recovered_.store(true, std::memory_order_release);
}

Status<frontend::FrontendError> VuLoop::set_coalesce(notify::CoalesceParams rx,
                                                     notify::CoalesceParams tx) noexcept {
    return tb_.fe().set_coalesce(rx, tx);
}

VuLoopResult VuLoop::finish(double drain_s) {
    const uint64_t deadline = now_ns() + static_cast<uint64_t>(drain_s * 1e9);
    // The sink's own view of what is still out: sent - received - lost.
    while (now_ns() < deadline) {
        const port::SinkStats s = sink_.stats();
        if (s.sink_pkts + s.sink_lost - s.sink_reordered >= sent_.load()) break;
        sleep_s(0.005);
    }
    stop_.store(true);
    tb_.rx_call().signal();  // out of wait_rx
    if (guest_.joinable()) guest_.join();
    if (reconnector_) reconnector_->stop();

    VuLoopResult res;
    res.sent = sent_.load();
    sink_.finish(res.sent);
    res.sink = sink_.stats();
    res.features = fe_->features();
    res.inflight = fe_->has_inflight();
    const auto& fs = tb_.qp().stats();
    res.tx_ring_full = fs.tx_drop_ring_full.get();
    res.rx_bad_len = fs.rx_drop_bad_len.get();
    res.losses = fe_->stats().losses.get();
    res.reconnects = reconnects_.load();
    res.seconds = static_cast<double>(now_ns() - start_ns_) / 1e9;
    res.mpps = static_cast<double>(res.sink.sink_pkts) / res.seconds / 1e6;
    {
        std::lock_guard lock(mu_);
        res.outages = outages_;
        res.error = error_;
    }
    const bool balanced =
        res.sink.sink_pkts + res.sink.sink_lost - res.sink.sink_reordered == res.sent;
    if (res.error.empty() && !balanced) res.error = "frames unaccounted for";
    if (res.error.empty() && res.sink.sink_drop_corrupt + res.sink.sink_drop_bad_len != 0) {
        res.error = "corrupt frames";
    }
    if (res.error.empty() && tb_.qp().rx_queue().broken()) res.error = "the rx queue broke";
    if (res.error.empty() && tb_.qp().tx_queue().broken()) res.error = "the tx queue broke";
    res.ok = res.error.empty();
    return res;
}

}  // namespace pvnet::bench
