// RingRelay: the guest thread (frontend serving tap A) and the setup of the
// backend serving tap B. See include/pvnet/relay/ring_relay.h.
#include "pvnet/relay/ring_relay.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "pvnet/util/thread.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::relay {
namespace {

/// The same set as virtio features: CSUM/GUEST_CSUM and TSO4/6 both ways.
constexpr uint64_t kRelayOffloadFeatures = [] {
    using namespace virtio;
    uint64_t f = 0;
    for (const unsigned b : {VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_HOST_TSO4,
                             VIRTIO_NET_F_HOST_TSO6, VIRTIO_NET_F_GUEST_TSO4,
                             VIRTIO_NET_F_GUEST_TSO6}) {
        f |= feature_mask(b);
    }
    return f;
}();

uint64_t drops(const port::TapPort& t) noexcept { return t.tx_drop_errno.total(); }

bool is_gso(const std::byte* hdr, uint32_t len) noexcept {
    virtio::virtio_net_hdr h;
    if (len < sizeof h) return false;
    std::memcpy(&h, hdr, sizeof h);
    return h.gso_type != virtio::VIRTIO_NET_HDR_GSO_NONE;
}

}  // namespace

Result<std::unique_ptr<RingRelay>, std::string> RingRelay::create(const RingRelayConfig& cfg) {
    std::unique_ptr<RingRelay> r(new RingRelay());
    r->cfg_ = cfg;
    port::TapConfig a = cfg.guest_tap, b = cfg.host_tap;
    // What tap A may hand the guest (HOST_TSO*) and tap B the backend
    // (GUEST_TSO*): the same set, or nothing.
    a.offloads = b.offloads = cfg.offloads ? port::kTunFGso : 0u;
    a.link_up = b.link_up = true;
    auto ta = port::TapPort::open(a);
    if (!ta) return unexpected("tap " + a.name + ": " + port::to_string(ta.error()));
    auto tb = port::TapPort::open(b);
    if (!tb) return unexpected("tap " + b.name + ": " + port::to_string(tb.error()));
    r->tap_a_ = std::move(*ta);
    r->tap_b_ = std::move(*tb);

    frontend::VirtioNetConfig fc = cfg.fe;
    fc.ctrl_vq = true;
    fc.buf_bytes = kSlotBytes;
    fc.indirect_desc = true;
    fc.mergeable_rx = true;
    // A 64 KiB GSO frame spans kMaxPieces slots; without offloads a frame
    // fits one. The pool covers a full rx ring and a full tx ring of the
    // largest frames, plus one more: the tx ring always fills (the queue
    // stops, its interrupt is armed) before the pool runs dry, because a
    // dry pool with no stopped queue would leave free-on-xmit, which reaps
    // only at the next transmit, with nothing to wake it.
    r->max_pieces_ = cfg.offloads ? kMaxPieces : 1;
    fc.tx_max_pieces = static_cast<uint16_t>(r->max_pieces_);
    fc.n_bufs = uint32_t{fc.rx_size} + (uint32_t{fc.tx_size} + 1u) * r->max_pieces_;
    if (auto err = r->tb_.setup(fc)) return unexpected("guest setup: " + *err);
    backend::VhostNetOptions bo;
    bo.rx_weight = cfg.rx_weight;
    bo.tx_weight = cfg.tx_weight;
    bo.busyloop_usecs = cfg.busyloop_usecs;
    // The offloads tap B may hand us are what the guest accepts: the device
    // sizes mergeable rx from them.
    auto dev = backend::VhostNet<port::TapPort>::create(
        r->tb_.device_setup(cfg.offloads ? kRelayOffloadFeatures : 0), bo, *r->tap_b_);
    if (!dev) {
        return unexpected(std::string("backend setup: ") +
                          std::string(backend::to_string(dev.error())));
    }
    r->dev_ = std::move(*dev);
    if (cfg.direct) {
        r->tb_.qp().set_direct_tx(frontend::DirectTx{
            [](void* d) noexcept {
                return static_cast<backend::VhostNet<port::TapPort>*>(d)->process_tx_now();
            },
            r->dev_.get(), cfg.direct_max});
    }
    r->flow_ = std::make_unique<frontend::Flow>(UINT32_MAX, frontend::SndbufRelease::Orphan);
    return r;
}

Status<std::string> RingRelay::start() {
    if (started_) return {};
    started_ = true;
    dev_->start(cfg_.backend_cpu);
    if (!tb_.fe().set_coalesce(cfg_.rx_coalesce, cfg_.tx_coalesce)) {
        return unexpected(std::string("NOTF_COAL control request failed"));
    }
    guest_thread_ = std::thread([this] { guest_loop(); });
    return {};
}

void RingRelay::stop() noexcept {
    if (!started_) return;
    // Drain the tx ring: the guest thread stops reading tap A and ends once
    // the backend consumed all it queued (or kDrainMs passed).
    draining_.store(true, std::memory_order_relaxed);
    tb_.rx_call().signal();  // wakes a sleeping guest thread
    if (guest_thread_.joinable()) guest_thread_.join();
    dev_->stop();
    // The worker is stopped and the guest thread joined: this thread owns
    // the guest now. What the backend delivered after the guest's last poll
    // goes to tap A, so the rx ring holds nothing in flight.
    frontend::QueuePair& qp = tb_.qp();
    if (!qp.rx_queue().broken()) {
        while (qp.poll_rx_packets(frontend::kNapiBudget, [this](std::span<const frontend::RxPiece> p) {
                   return deliver_rx(p);
               }) != 0) {
        }
    }
    started_ = false;
}

uint64_t RingRelay::tx_in_flight() const noexcept {
    const auto& bs = dev_->stats();
    const uint64_t queued = tb_.fe().queue_pair(0).stats().tx_pkts.get();
    const uint64_t consumed = bs.tx_pkts.get() + bs.tx_drop_bad_chain.get() + bs.tx_drop_port.get();
    return queued > consumed ? queued - consumed : 0;
}

bool RingRelay::deliver_rx(std::span<const frontend::RxPiece> pieces) noexcept {
    if (pieces.size() > rx_iov_.size()) {
        lost_rx_.add();  // more pieces than a ring this size can hold: not ours
        return false;
    }
    uint32_t len = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        rx_iov_[i] = iovec{pieces[i].host, pieces[i].len};
        len += pieces[i].len;
    }
    if (is_gso(pieces[0].host, pieces[0].len)) gso_rx_.add();
    // Tap A full (Retry): the rx buffer goes back to the ring, so the frame
    // cannot wait; it is a counted drop.
    if (tap_a_->send(std::span<const iovec>(rx_iov_.data(), pieces.size()), len) ==
        port::SendResult::Retry) {
        tap_a_full_.add();
    }
    return false;
}

uint32_t RingRelay::guest_xmit() noexcept {
    frontend::QueuePair& qp = tb_.qp();
    const uint32_t slot = qp.buf_bytes();
    uint32_t queued = 0;
    // start_xmit reaps first (free_old_xmit): free-on-xmit has no other
    // place to reap, and a stopped queue restarts only here after its tx
    // interrupt (skb_xmit_done just says there is room).
    if (qp.tx_stopped() || qp.free_bufs() < max_pieces_) (void)qp.free_old_xmit();
    while (queued < frontend::kNapiBudget && !qp.tx_stopped() && qp.free_bufs() >= max_pieces_) {
        // Room for the largest frame tap A may hand us: tun cuts what does
        // not fit, so the read gets every slot a frame could need, and the
        // ones it did not fill go straight back.
        for (uint32_t i = 0; i < max_pieces_; ++i) {
            (void)qp.alloc_buf(tx_ids_[i]);
            tx_iov_[i] = iovec{qp.buf_host(tx_ids_[i]), slot};
        }
        const uint32_t len = tap_a_->recv(std::span<const iovec>(tx_iov_.data(), max_pieces_));
        const uint32_t used = (len + slot - 1) / slot;
        for (uint32_t i = max_pieces_; i-- > used;) qp.free_buf(tx_ids_[i]);
        if (len == 0) break;
        for (uint32_t i = 0; i < used; ++i) {
            tx_pieces_[i] = frontend::TxPiece{tx_ids_[i], i + 1 < used ? slot : len - i * slot};
        }
        const bool gso = is_gso(qp.buf_host(tx_ids_[0]), len);
        const frontend::XmitStatus st =
            qp.xmit_sg(*flow_, std::span<const frontend::TxPiece>(tx_pieces_.data(), used));
        if (st != frontend::XmitStatus::Ok) {
            // Dropped: xmit_sg freed the slots and counted it (a broken
            // ring). Stopped cannot happen (checked above, nothing else runs
            // the queue), but the frame is gone either way: count it.
            if (st != frontend::XmitStatus::Dropped) {
                for (uint32_t i = 0; i < used; ++i) qp.free_buf(tx_ids_[i]);
                lost_.add();
            }
            break;
        }
        if (gso) gso_tx_.add();
        if (len > max_tx_frame_.get()) max_tx_frame_.add(len - max_tx_frame_.get());
        ++queued;
    }
    return queued;
}

void RingRelay::guest_loop() noexcept {
    pin_current_thread(cfg_.guest_cpu);
    frontend::QueuePair& qp = tb_.qp();
    qp.try_fill_recv();
    uint32_t spin_usecs = cfg_.fe.busy_poll_usecs;
    std::chrono::steady_clock::time_point drain_deadline{};
    while (!stop_.load(std::memory_order_relaxed)) {
        const bool draining = draining_.load(std::memory_order_relaxed);
        if (draining) {
            const auto now = std::chrono::steady_clock::now();
            if (drain_deadline == std::chrono::steady_clock::time_point{}) {
                drain_deadline = now + std::chrono::milliseconds(kDrainMs);
            }
            if (tx_in_flight() == 0 || tb_.any_broken(*dev_) || now >= drain_deadline) break;
        }
        // Rx NAPI: the device's frames into tap A (and, with at-rx, tx
        // completions reaped on the way).
        const uint32_t n = qp.busy_poll_rx_packets(
            frontend::kNapiBudget,
            [this](std::span<const frontend::RxPiece> pieces) { return deliver_rx(pieces); },
            spin_usecs);
        spin_usecs = cfg_.fe.busy_poll_usecs;
        if (n != 0) qp.try_fill_recv();
        qp.tx_interrupt();
        const uint32_t queued = draining ? 0 : guest_xmit();
        if (queued != 0) {
            const uint64_t direct_before = qp.stats().tx_direct.get();
            qp.tx_flush();
            // A small batch just went out in this thread (tap B's kernel
            // answered inside that write if it answers at once): wait for
            // the answer spinning, not asleep, saving a wake-up per round trip.
            if (qp.stats().tx_direct.get() != direct_before) {
                spin_usecs = std::max(spin_usecs, cfg_.direct_spin_usecs);
            }
        }
        if (n == 0 && queued == 0 && qp.napi_complete()) {
            // Idle: sleep on tap A (unless the tx queue is stopped: then only
            // the tx interrupt can restart it) and both interrupts.
            // A tap whose device is gone polls as an error forever: stop
            // watching it rather than spin (the backend does the same for tap B).
            pollfd p[3] = {{tap_a_gone_ || draining ? -1 : tap_a_->rx_fd(),
                            static_cast<short>(qp.tx_stopped() ? 0 : POLLIN), 0},
                           {tb_.rx_call().fd(), POLLIN, 0},
                           {tb_.tx_call().fd(), POLLIN, 0}};
            if (poll(p, 3, draining ? 1 : 100) > 0) {
                if ((p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) tap_a_gone_ = true;
                if (p[1].revents & POLLIN) tb_.rx_call().consume();
            }
        }
    }
}

RingRelayCounters RingRelay::counters() const noexcept {
    const auto& fs = tb_.fe().queue_pair(0).stats();
    const auto& bs = dev_->stats();
    RingRelayCounters c;
    c.a_to_b_pkts = bs.tx_pkts.get();
    c.a_to_b_bytes = bs.tx_bytes.get();
    c.b_to_a_pkts = fs.rx_pkts.get();
    c.b_to_a_bytes = fs.rx_bytes.get();
    c.kicks = fs.rx_kicks.get() + fs.tx_kicks.get();
    c.interrupts = bs.rx_calls.get() + bs.tx_calls.get();
    c.direct_runs = bs.direct_runs.get();
    c.direct_pkts = bs.direct_pkts.get();
    c.direct_busy = bs.direct_busy.get();
    c.tap_a_drops = drops(*tap_a_) + tap_a_full_.get();
    c.tap_b_drops = drops(*tap_b_);
    c.tap_a_einval = tap_a_->tx_drop_errno.get(port::TapErrno::Inval);
    c.tap_b_einval = tap_b_->tx_drop_errno.get(port::TapErrno::Inval);
    c.gso_frames_tx = gso_tx_.get();
    c.gso_frames_rx = gso_rx_.get();
    c.max_tx_frame = max_tx_frame_.get();
    c.ring_drops = lost_.get() + lost_rx_.get() + fs.tx_drop_ring_full.get() + fs.rx_drop_bad_len.get() +
                   bs.tx_drop_bad_chain.get() + bs.rx_drop_bad_chain.get() +
                   bs.rx_drop_no_room.get();
    c.broken = tb_.any_broken(*dev_);
    c.a_read = tap_a_->rx_pkts.get();
    c.a_read_drops = tap_a_->rx_drops();
    c.g2h_queued = fs.tx_pkts.get();
    c.g2h_ring_full = fs.tx_drop_ring_full.get();
    c.g2h_lost = lost_.get();
    c.g2h_bad_chain = bs.tx_drop_bad_chain.get();
    c.g2h_port_drops = bs.tx_drop_port.get();
    c.g2h_in_flight = tx_in_flight();
    c.b_written = tap_b_->tx_pkts.get();
    c.b_write_drops = tap_b_->tx_drops();
    c.b_write_retry = tap_b_->tx_retry.get();
    c.g2h_retry = bs.tx_retry.get();
    c.b_read = tap_b_->rx_pkts.get();
    c.b_read_drops = tap_b_->rx_drops();
    c.h2g_delivered = bs.rx_pkts.get();
    c.h2g_no_room = bs.rx_drop_no_room.get();
    c.h2g_bad_chain = bs.rx_drop_bad_chain.get();
    c.h2g_bad_len = fs.rx_drop_bad_len.get();
    c.h2g_length_errors = fs.rx_length_errors.get();
    // The guest's rx_pkts counts every first used entry, the short ones too.
    const uint64_t reaped = fs.rx_pkts.get() - std::min(fs.rx_pkts.get(), c.h2g_bad_len);
    c.h2g_in_flight = c.h2g_delivered > reaped ? c.h2g_delivered - reaped : 0;
    c.h2g_lost = lost_rx_.get();
    c.a_written = tap_a_->tx_pkts.get();
    c.a_write_drops = tap_a_->tx_drops();
    c.a_full = tap_a_full_.get();
    return c;
}

}  // namespace pvnet::relay
