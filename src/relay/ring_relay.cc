// RingRelay: the guest thread (frontend serving tap A) and the setup of the
// backend serving tap B. See include/pvnet/relay/ring_relay.h.
#include "pvnet/relay/ring_relay.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "pvnet/net/flow_hash.h"
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

/// The symmetric flow hash of the frame behind the virtio_net_hdr at `slot`
/// (`len` bytes: the first piece, which holds the headers; a slot is a page).
uint32_t flow_hash_after_hdr(const std::byte* slot, uint32_t len) noexcept {
    constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
    if (len <= kHdr) return 0;
    // uint8_t may alias any object's bytes.
    return net::flow_hash_symmetric(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(slot) + kHdr, len - kHdr));
}

}  // namespace

Result<std::unique_ptr<RingRelay>, std::string> RingRelay::create(const RingRelayConfig& cfg) {
    if (cfg.queues < 1 || cfg.queues > kMaxRelayQueues) {
        return unexpected("queues " + std::to_string(cfg.queues) + ": 1.." +
                          std::to_string(kMaxRelayQueues));
    }
    // At-rx reaps the send queue from the receive queue's poll, which runs
    // without the tx lock that xps needs.
    if (cfg.xps && cfg.fe.clean_tx_at_rx) {
        return unexpected(std::string("xps and at-rx together: at-rx reaps tx without its lock"));
    }
    const bool remote = !cfg.vhost_user.empty();
    if (remote && (cfg.queues != 1 || cfg.xps || cfg.direct)) {
        return unexpected(std::string(
            "with a vhost-user backend: one queue, no xps, no direct path (the backend is "
            "another process)"));
    }
    std::unique_ptr<RingRelay> r(new RingRelay());
    r->cfg_ = cfg;
    const uint64_t offload_bits = cfg.offloads ? kRelayOffloadFeatures : 0;
    if (remote) {
        vhost_user::FrontendConfig vc;
        vc.path = cfg.vhost_user;
        vc.server = cfg.vhost_user_server;
        vc.connect_timeout_ms = 10'000;
        auto fe = vhost_user::Frontend::create(vc);
        if (!fe) return unexpected(fe.error());
        r->vu_ = std::move(*fe);
        using namespace virtio;
        // The layout below needs indirect tables and mergeable rx buffers.
        const uint64_t needed = feature_mask(VIRTIO_F_VERSION_1) |
                                feature_mask(VIRTIO_RING_F_INDIRECT_DESC) |
                                feature_mask(VIRTIO_NET_F_MRG_RXBUF) | offload_bits;
        // The control queue where serve offers its own (--ctrl-vq): coalescing asked for.
        const uint64_t ctrl = feature_mask(VIRTIO_NET_F_CTRL_VQ) | feature_mask(VIRTIO_NET_F_NOTF_COAL);
        const uint64_t wanted =
            needed | ctrl | (cfg.fe.event_idx ? feature_mask(VIRTIO_RING_F_EVENT_IDX) : 0);
        auto f = r->vu_->connect(wanted, ctrl);
        if (!f) return unexpected("vhost-user backend: " + f.error().text);
        if ((*f & needed) != needed) {
            return unexpected(std::string("vhost-user backend: it does not offer ") +
                              ((*f & offload_bits) != offload_bits
                                   ? "the offloads (run with --offloads off)"
                                   : "indirect descriptors and mergeable rx buffers"));
        }
        r->cfg_.fe.event_idx = has_feature(*f, VIRTIO_RING_F_EVENT_IDX);
        r->remote_ctrl_ = (*f & ctrl) == ctrl;
        const notify::CoalesceParams none{};
        if (!r->remote_ctrl_ && (cfg.rx_coalesce.max_frames != none.max_frames ||
                                 cfg.rx_coalesce.max_usecs != none.max_usecs ||
                                 cfg.tx_coalesce.max_frames != none.max_frames ||
                                 cfg.tx_coalesce.max_usecs != none.max_usecs)) {
            return unexpected(std::string(
                "vhost-user backend: coalescing is asked over the control queue, which it does "
                "not offer (run pvnet serve with --ctrl-vq)"));
        }
    }
    port::TapConfig a = cfg.guest_tap, b = cfg.host_tap;
    // What tap A may hand the guest (HOST_TSO*) and tap B the backend
    // (GUEST_TSO*): the same set, or nothing.
    a.offloads = b.offloads = cfg.offloads ? port::kTunFGso : 0u;
    a.link_up = b.link_up = true;
    // The backend hands tap B each tx burst at once (VhostNet's send_batch):
    // io_uring writes, one enter per burst.
    b.tx_batch = backend::kMaxBurst;
    // One queue: a plain tap, as before queues existed. More: the first
    // open makes the multi-queue tap, each further one attaches a queue.
    a.multi_queue = b.multi_queue = cfg.queues > 1;
    for (uint16_t i = 0; i < cfg.queues; ++i) {
        auto ta = port::TapPort::open(a);
        if (!ta) return unexpected("tap " + a.name + ": " + port::to_string(ta.error()));
        auto q = std::make_unique<GuestQueue>();
        q->relay = r.get();
        q->index = i;
        q->tap_a = std::move(*ta);
        q->flow = std::make_unique<frontend::Flow>(UINT32_MAX, frontend::SndbufRelease::Orphan);
        r->queues_.push_back(std::move(q));
        if (remote) continue;
        auto tb = port::TapPort::open(b);
        if (!tb) return unexpected("tap " + b.name + ": " + port::to_string(tb.error()));
        r->tap_b_.push_back(std::move(*tb));
    }

    frontend::VirtioNetConfig fc = r->cfg_.fe;
    fc.queue_pairs = cfg.queues;
    fc.ctrl_vq = !remote || r->remote_ctrl_;
    fc.buf_bytes = kSlotBytes;
    fc.indirect_desc = true;
    fc.mergeable_rx = true;
    // A 64 KiB GSO frame spans kMaxPieces slots; without offloads a frame
    // fits one. Each pair's pool covers a full rx ring and a full tx ring of
    // the largest frames, plus one more: the tx ring always fills (the queue
    // stops, its interrupt is armed) before the pool runs dry, because a
    // dry pool with no stopped queue would leave free-on-xmit, which reaps
    // only at the next transmit, with nothing to wake it.
    r->max_pieces_ = cfg.offloads ? kMaxPieces : 1;
    fc.tx_max_pieces = static_cast<uint16_t>(r->max_pieces_);
    fc.n_bufs = uint32_t{fc.rx_size} + (uint32_t{fc.tx_size} + 1u) * r->max_pieces_;
    if (cfg.xps) {
        // Every other thread may hold one frame's slots of this pool while
        // it copies into them; the pool is theirs too.
        fc.shared_pool = true;
        fc.n_bufs += (uint32_t{cfg.queues} - 1u) * r->max_pieces_;
    }
    if (auto err = r->tb_.setup(fc)) return unexpected("guest setup: " + *err);
    if (cfg.xps) {
        frontend::Xps& xps = r->tb_.fe().xps();
        for (const auto& [txq, mask] : cfg.xps_cpus) {
            if (auto err = xps.set_cpus(txq, mask)) return unexpected("xps_cpus: " + *err);
        }
        for (const auto& [txq, mask] : cfg.xps_rxqs) {
            if (auto err = xps.set_rxqs(txq, mask)) return unexpected("xps_rxqs: " + *err);
        }
        if (cfg.symmetric) xps.symmetric(cfg.queues);
        for (auto& q : r->queues_) {
            q->xps_stats = std::make_unique<frontend::XpsThreadStats>(cfg.queues);
        }
    }
    if (remote) {
        const mem::MemoryRegion& g = r->tb_.guest_region();
        const vhost_user::GuestMemory gm{g.fd(), pair::kGuestBase, g.size(), g.host()};
        if (auto st = r->vu_->start(r->tb_.device_setup(offload_bits), gm); !st) {
            return unexpected("vhost-user backend: " + st.error().text);
        }
        return r;
    }
    backend::VhostNetOptions bo;
    bo.rx_weight = cfg.rx_weight;
    bo.tx_weight = cfg.tx_weight;
    bo.busyloop_usecs = cfg.busyloop_usecs;
    bo.workers = cfg.workers;
    std::vector<port::TapPort*> ports;
    for (const auto& t : r->tap_b_) ports.push_back(t.get());
    auto dev = backend::VhostNet<port::TapPort>::create(bo, std::span<port::TapPort* const>(ports));
    if (!dev) {
        return unexpected(std::string("backend setup: ") +
                          std::string(backend::to_string(dev.error())));
    }
    r->dev_ = std::move(*dev);
    // The offloads tap B may hand us are what the guest accepts: the device
    // sizes mergeable rx from them.
    if (auto st = r->dev_->configure(r->tb_.device_setup(offload_bits));
        !st) {
        return unexpected(std::string("backend setup: ") +
                          std::string(backend::to_string(st.error())));
    }
    if (cfg.direct) {
        for (auto& q : r->queues_) {
            r->tb_.qp(q->index).set_direct_tx(frontend::DirectTx{
                [](void* d) noexcept {
                    const auto* gq = static_cast<const GuestQueue*>(d);
                    return gq->relay->dev_->process_tx_now(gq->index);
                },
                q.get(), cfg.direct_max});
        }
    }
    return r;
}

Status<std::string> RingRelay::start() {
    if (started_) return {};
    started_ = true;
    if (remote()) {
        // A restarted backend gets the same rings; the guest threads run on meanwhile.
        vhost_user::Reconnector::Hooks h;
        h.lost = [this] { vu_losses_.add_shared(); };
        h.done = [this](bool ok, const std::string&) {
            if (ok) vu_reconnects_.add_shared();
        };
        reconnector_ = std::make_unique<vhost_user::Reconnector>(*vu_, 3600.0, std::move(h));
        if (remote_ctrl_ && !tb_.fe().set_coalesce(cfg_.rx_coalesce, cfg_.tx_coalesce)) {
            return unexpected(std::string("NOTF_COAL control request failed"));
        }
        for (auto& q : queues_) q->thread = std::thread([this, &q = *q] { guest_loop(q); });
        return {};
    }
    dev_->start(cfg_.backend_cpu);
    if (!tb_.fe().set_coalesce(cfg_.rx_coalesce, cfg_.tx_coalesce)) {
        return unexpected(std::string("NOTF_COAL control request failed"));
    }
    // virtnet_set_queues at probe: with a control queue the device serves
    // pair 0 alone until told otherwise.
    if (cfg_.queues > 1 && !tb_.fe().set_queue_pairs(cfg_.queues)) {
        return unexpected(std::string("VQ_PAIRS_SET control request failed"));
    }
    for (auto& q : queues_) q->thread = std::thread([this, &q = *q] { guest_loop(q); });
    return {};
}

void RingRelay::stop() noexcept {
    if (!started_) return;
    // Drain the tx rings: each guest thread stops reading tap A and ends
    // once the backend consumed all it queued (or kDrainMs passed).
    draining_.store(true, std::memory_order_relaxed);
    for (const auto& q : queues_) tb_.rx_call(q->index).signal();  // wakes a sleeping guest thread
    for (auto& q : queues_) {
        if (q->thread.joinable()) q->thread.join();
    }
    if (remote()) {
        // The backend stops its rings at a consistent point (GET_VRING_BASE).
        reconnector_.reset();
        (void)vu_->stop();
    } else {
        dev_->stop();
    }
    // The worker is stopped and the guest threads joined: this thread owns
    // the guest now. What the backend delivered after a guest thread's last
    // poll goes to its tap A queue, so no rx ring holds anything in flight.
    for (auto& q : queues_) {
        frontend::QueuePair& qp = tb_.qp(q->index);
        if (qp.rx_queue().broken()) continue;
        while (qp.poll_rx_packets(frontend::kNapiBudget,
                                  [this, &q = *q](std::span<const frontend::RxPiece> p) {
                                      return deliver_rx(q, p);
                                  }) != 0) {
        }
    }
    started_ = false;
}

std::optional<std::string> RingRelay::set_xps_mask(bool rxqs, uint16_t txq,
                                                   std::string_view mask) {
    if (!cfg_.xps) return std::string("XPS is off");
    frontend::Xps& xps = tb_.fe().xps();
    return rxqs ? xps.set_rxqs(txq, mask) : xps.set_cpus(txq, mask);
}

bool RingRelay::any_broken() const noexcept {
    if (!remote()) return tb_.any_broken(*dev_);
    for (const auto& q : queues_) {
        const frontend::QueuePair& qp = tb_.fe().queue_pair(q->index);
        if (qp.rx_queue().broken() || qp.tx_queue().broken()) return true;
    }
    return false;
}

uint64_t RingRelay::tx_in_flight(uint16_t i) const noexcept {
    if (remote()) {
        const auto& fs = tb_.fe().queue_pair(i).stats();
        const uint64_t queued = fs.tx_pkts.get(), done = fs.tx_completions.get();
        return queued > done ? queued - done : 0;
    }
    const auto& bs = dev_->stats(i);
    const uint64_t queued = tb_.fe().queue_pair(i).stats().tx_pkts.get();
    const uint64_t consumed = bs.tx_pkts.get() + bs.tx_drop_bad_chain.get() + bs.tx_drop_port.get();
    return queued > consumed ? queued - consumed : 0;
}

bool RingRelay::deliver_rx(GuestQueue& q, std::span<const frontend::RxPiece> pieces) noexcept {
    if (pieces.size() > q.rx_iov.size()) {
        q.lost_rx.add();  // more pieces than a ring this size can hold: not ours
        return false;
    }
    uint32_t len = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        q.rx_iov[i] = iovec{pieces[i].host, pieces[i].len};
        len += pieces[i].len;
    }
    if (is_gso(pieces[0].host, pieces[0].len)) q.gso_rx.add();
    if (cfg_.xps) {
        // sk_rx_queue_set: the flow's next transmit finds this queue.
        flows_.record(flow_hash_after_hdr(pieces[0].host, pieces[0].len), q.index);
    }
    // Tap A full (Retry): the rx buffer goes back to the ring, so the frame
    // cannot wait; it is a counted drop.
    if (q.tap_a->send(std::span<const iovec>(q.rx_iov.data(), pieces.size()), len) ==
        port::SendResult::Retry) {
        q.tap_a_full.add();
    }
    return false;
}

uint32_t RingRelay::read_tap_a(GuestQueue& q, frontend::QueuePair& qp, uint32_t& used) noexcept {
    // Room for the largest frame tap A may hand us: tun cuts what does not
    // fit, so the read gets every slot a frame could need, and the ones it
    // did not fill go straight back.
    const uint32_t slot = qp.buf_bytes();
    for (uint32_t i = 0; i < max_pieces_; ++i) {
        if (!qp.alloc_buf(q.tx_ids[i])) {
            // Only with xps (pools are shared): another thread took the
            // slots since the caller checked. Read nothing now.
            while (i-- > 0) qp.free_buf(q.tx_ids[i]);
            used = 0;
            return 0;
        }
        q.tx_iov[i] = iovec{qp.buf_host(q.tx_ids[i]), slot};
    }
    const uint32_t len = q.tap_a->recv(std::span<const iovec>(q.tx_iov.data(), max_pieces_));
    used = (len + slot - 1) / slot;
    for (uint32_t i = max_pieces_; i-- > used;) qp.free_buf(q.tx_ids[i]);
    return len;
}

bool RingRelay::send_frame(GuestQueue& q, frontend::QueuePair& qp, uint32_t used,
                           uint32_t len) noexcept {
    const uint32_t slot = qp.buf_bytes();
    for (uint32_t i = 0; i < used; ++i) {
        q.tx_pieces[i] = frontend::TxPiece{q.tx_ids[i], i + 1 < used ? slot : len - i * slot};
    }
    const bool gso = is_gso(qp.buf_host(q.tx_ids[0]), len);
    const frontend::XmitStatus st =
        qp.xmit_sg(*q.flow, std::span<const frontend::TxPiece>(q.tx_pieces.data(), used));
    if (st != frontend::XmitStatus::Ok) {
        // Dropped: xmit_sg freed the slots and counted it (a broken ring).
        // Stopped: the caller checked, but the frame is gone either way: count it.
        if (st != frontend::XmitStatus::Dropped) {
            for (uint32_t i = 0; i < used; ++i) qp.free_buf(q.tx_ids[i]);
            q.lost.add();
        }
        return false;
    }
    if (gso) q.gso_tx.add();
    if (len > q.max_tx_frame.get()) q.max_tx_frame.add(len - q.max_tx_frame.get());
    return true;
}

uint32_t RingRelay::guest_xmit(GuestQueue& q) noexcept {
    frontend::QueuePair& qp = tb_.qp(q.index);
    uint32_t queued = 0;
    // start_xmit reaps first (free_old_xmit): free-on-xmit has no other
    // place to reap, and a stopped queue restarts only here after its tx
    // interrupt (skb_xmit_done just says there is room).
    if (qp.tx_stopped() || qp.free_bufs() < max_pieces_) (void)qp.free_old_xmit();
    while (queued < frontend::kNapiBudget && !qp.tx_stopped() && qp.free_bufs() >= max_pieces_) {
        uint32_t used = 0;
        const uint32_t len = read_tap_a(q, qp, used);
        if (len == 0 || !send_frame(q, qp, used, len)) break;
        ++queued;
    }
    return queued;
}

uint32_t RingRelay::guest_xmit_xps(GuestQueue& q, bool& direct) noexcept {
    frontend::QueuePair& own = tb_.qp(q.index);
    const frontend::Xps& xps = tb_.fe().xps();
    {
        // As guest_xmit: reap our own queue first, which may have stopped
        // with our pool's slots in flight.
        std::lock_guard g(q.tx_lock);
        if (own.tx_stopped() || own.free_bufs() < max_pieces_) (void)own.free_old_xmit();
    }
    // The CPU is read once a burst, as one start_xmit batch runs on one CPU.
    const int cpu = sched_getcpu();
    const unsigned this_cpu = cpu < 0 ? 0u : static_cast<unsigned>(cpu);
    GuestQueue* locked = nullptr;  // the pair whose tx lock this thread holds
    uint64_t direct_before = 0;
    auto release = [&] {
        if (locked == nullptr) return;
        frontend::QueuePair& qp = tb_.qp(locked->index);
        qp.tx_flush();
        if (qp.stats().tx_direct.get() != direct_before) direct = true;
        locked->tx_lock.unlock();
        locked = nullptr;
    };
    uint32_t queued = 0;
    while (queued < frontend::kNapiBudget) {
        uint32_t used = 0;
        const uint32_t len = read_tap_a(q, own, used);
        if (len == 0) break;
        const uint32_t hash =
            flow_hash_after_hdr(own.buf_host(q.tx_ids[0]), std::min(len, own.buf_bytes()));
        const std::optional<uint16_t> rxq = flows_.lookup(hash);
        const frontend::XpsPick pick = xps.pick(rxq, this_cpu, hash);
        q.xps_stats->record(pick, rxq);
        GuestQueue& dst_q = *queues_[pick.txq];
        if (locked != &dst_q) {
            release();
            dst_q.tx_lock.lock();
            locked = &dst_q;
            direct_before = tb_.qp(dst_q.index).stats().tx_direct.get();
        }
        frontend::QueuePair& dst = tb_.qp(dst_q.index);
        // A stopped queue restarts when its completions are reaped; in
        // free-on-xmit mode only a transmit reaps (start_xmit).
        if (dst.tx_stopped()) (void)dst.free_old_xmit();
        if (dst.tx_stopped()) {
            for (uint32_t i = 0; i < used; ++i) own.free_buf(q.tx_ids[i]);
            q.lost.add();
            continue;
        }
        if (&dst != &own) {
            // Into the other pair's buffers; ours go back to our pool.
            uint32_t copied = 0;
            for (; copied < used; ++copied) {
                uint32_t id = 0;
                if (!dst.alloc_buf(id)) break;
                const uint32_t slot = own.buf_bytes();
                const uint32_t n = copied + 1 < used ? slot : len - copied * slot;
                std::memcpy(dst.buf_host(id), own.buf_host(q.tx_ids[copied]), n);
                own.free_buf(q.tx_ids[copied]);
                q.tx_ids[copied] = id;
            }
            if (copied < used) {
                // The other pool is dry: drop the frame, counted.
                for (uint32_t i = 0; i < copied; ++i) dst.free_buf(q.tx_ids[i]);
                for (uint32_t i = copied; i < used; ++i) own.free_buf(q.tx_ids[i]);
                q.lost.add();
                continue;
            }
            q.xps_copied.add();
        }
        if (send_frame(q, dst, used, len)) ++queued;
    }
    release();
    return queued;
}

void RingRelay::guest_loop(GuestQueue& q) noexcept {
    if (cfg_.guest_cpu >= 0) {
        const long ncpu = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
        pin_current_thread(static_cast<int>((cfg_.guest_cpu + long{q.index}) % ncpu));
    }
    frontend::QueuePair& qp = tb_.qp(q.index);
    const notify::EventFd& rx_call = tb_.rx_call(q.index);
    const notify::EventFd& tx_call = tb_.tx_call(q.index);
    const auto deliver = [this, &q](std::span<const frontend::RxPiece> pieces) {
        return deliver_rx(q, pieces);
    };
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
            if (remote()) qp.free_old_xmit();
            if (tx_in_flight(q.index) == 0 || any_broken() || now >= drain_deadline) {
                break;
            }
        }
        // Rx NAPI: the device's frames into tap A (and, with at-rx, tx
        // completions reaped on the way).
        const uint32_t n = qp.busy_poll_rx_packets(frontend::kNapiBudget, deliver, spin_usecs);
        spin_usecs = cfg_.fe.busy_poll_usecs;
        if (n != 0) qp.try_fill_recv();
        uint32_t queued = 0;
        bool went_direct = false;
        if (cfg_.xps) {
            {
                std::lock_guard g(q.tx_lock);
                qp.tx_interrupt();
            }
            if (!draining) queued = guest_xmit_xps(q, went_direct);
        } else {
            qp.tx_interrupt();
            queued = draining ? 0 : guest_xmit(q);
            if (queued != 0) {
                const uint64_t direct_before = qp.stats().tx_direct.get();
                qp.tx_flush();
                went_direct = qp.stats().tx_direct.get() != direct_before;
            }
        }
        // A small batch just went out in this thread (tap B's kernel
        // answered inside that write if it answers at once): wait for the
        // answer spinning, not asleep, saving a wake-up per round trip.
        if (went_direct) spin_usecs = std::max(spin_usecs, cfg_.direct_spin_usecs);
        if (n == 0 && queued == 0 && qp.napi_complete()) {
            // Idle: sleep on tap A (unless the tx queue is stopped: then only
            // the tx interrupt can restart it) and both interrupts.
            // A tap whose device is gone polls as an error forever: stop
            // watching it rather than spin (the backend does the same for tap B).
            // With xps the pool says it: our queue's state is under its lock.
            const bool tx_room = cfg_.xps ? qp.free_bufs() >= max_pieces_ : !qp.tx_stopped();
            pollfd p[3] = {{q.tap_a_gone || draining ? -1 : q.tap_a->rx_fd(),
                            static_cast<short>(tx_room ? POLLIN : 0), 0},
                           {rx_call.fd(), POLLIN, 0},
                           {tx_call.fd(), POLLIN, 0}};
            if (poll(p, 3, draining ? 1 : 100) > 0) {
                if ((p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) q.tap_a_gone = true;
                if (p[1].revents & POLLIN) rx_call.consume();
            }
        }
    }
}

RingRelayCounters RingRelay::counters() const {
    RingRelayCounters c;
    c.broken = any_broken();
    c.remote_backend = remote();
    c.backend_losses = vu_losses_.get();
    c.backend_reconnects = vu_reconnects_.get();
    c.queues.resize(queues_.size());
    // With a backend in another process its counters and tap B's read as 0 here.
    static const backend::VhostNetStats kRemoteStats{};
    static const port::TapPort* const kNoTap = nullptr;
    for (const auto& q : queues_) {
        const auto& fs = tb_.fe().queue_pair(q->index).stats();
        const auto& bs = remote() ? kRemoteStats : dev_->stats(q->index);
        const port::TapPort& ta = *q->tap_a;
        const port::TapPort* tbp = remote() ? kNoTap : tap_b_[q->index].get();
        RingRelayQueueCounters& qc = c.queues[q->index];
        // With a remote backend: what it consumed, as the guest saw it completed.
        qc.a_to_b_pkts = remote() ? fs.tx_completions.get() : bs.tx_pkts.get();
        // With a remote backend: the bytes read from tap A (headers included), as queued.
        qc.a_to_b_bytes = remote() ? ta.rx_bytes.get() : bs.tx_bytes.get();
        qc.b_to_a_pkts = fs.rx_pkts.get();
        qc.b_to_a_bytes = fs.rx_bytes.get();
        qc.kicks = fs.rx_kicks.get() + fs.tx_kicks.get();
        qc.interrupts = bs.rx_calls.get() + bs.tx_calls.get();
        qc.a_read = ta.rx_pkts.get();
        qc.b_read = tbp != nullptr ? tbp->rx_pkts.get() : 0;
        qc.napi_polls = fs.napi_polls.get();
        qc.tx_completions = fs.tx_completions.get();
        c.a_to_b_pkts += qc.a_to_b_pkts;
        c.a_to_b_bytes += qc.a_to_b_bytes;
        c.b_to_a_pkts += qc.b_to_a_pkts;
        c.b_to_a_bytes += qc.b_to_a_bytes;
        c.kicks += qc.kicks;
        c.interrupts += qc.interrupts;
        c.a_read += qc.a_read;
        c.b_read += qc.b_read;
        c.direct_runs += bs.direct_runs.get();
        c.direct_pkts += bs.direct_pkts.get();
        c.direct_busy += bs.direct_busy.get();
        c.tap_a_drops += drops(ta) + q->tap_a_full.get();
        c.tap_b_drops += tbp != nullptr ? drops(*tbp) : 0;
        c.tap_a_einval += ta.tx_drop_errno.get(port::TapErrno::Inval);
        c.tap_b_einval += tbp != nullptr ? tbp->tx_drop_errno.get(port::TapErrno::Inval) : 0;
        c.gso_frames_tx += q->gso_tx.get();
        c.gso_frames_rx += q->gso_rx.get();
        c.max_tx_frame = std::max(c.max_tx_frame, q->max_tx_frame.get());
        c.ring_drops += q->lost.get() + q->lost_rx.get() + fs.tx_drop_ring_full.get() +
                        fs.rx_drop_bad_len.get() + bs.tx_drop_bad_chain.get() +
                        bs.rx_drop_bad_chain.get() + bs.rx_drop_no_room.get();
        c.a_read_drops += ta.rx_drops();
        c.g2h_queued += fs.tx_pkts.get();
        c.g2h_ring_full += fs.tx_drop_ring_full.get();
        c.g2h_lost += q->lost.get();
        c.g2h_bad_chain += bs.tx_drop_bad_chain.get();
        c.g2h_port_drops += bs.tx_drop_port.get();
        c.g2h_in_flight += tx_in_flight(q->index);
        if (tbp != nullptr) {
            c.b_written += tbp->tx_pkts.get();
            c.b_write_drops += tbp->tx_drops();
            c.b_write_retry += tbp->tx_retry.get();
            c.b_read_drops += tbp->rx_drops();
        }
        c.g2h_retry += bs.tx_retry.get();
        c.h2g_delivered += remote() ? fs.rx_pkts.get() : bs.rx_pkts.get();
        c.h2g_no_room += bs.rx_drop_no_room.get();
        c.h2g_bad_chain += bs.rx_drop_bad_chain.get();
        c.h2g_bad_len += fs.rx_drop_bad_len.get();
        c.h2g_length_errors += fs.rx_length_errors.get();
        // The guest's rx_pkts counts every first used entry, the short ones too.
        const uint64_t reaped = fs.rx_pkts.get() - std::min(fs.rx_pkts.get(), fs.rx_drop_bad_len.get());
        const uint64_t delivered = remote() ? fs.rx_pkts.get() : bs.rx_pkts.get();
        c.h2g_in_flight += delivered > reaped ? delivered - reaped : 0;
        c.h2g_lost += q->lost_rx.get();
        c.a_written += ta.tx_pkts.get();
        c.a_write_drops += ta.tx_drops();
        c.a_full += q->tap_a_full.get();
        if (q->xps_stats) {
            const frontend::XpsThreadStats& xs = *q->xps_stats;
            RingRelayThreadCounters t;
            for (const Counter& u : xs.txq_used) t.txq_used.push_back(u.get());
            t.by_rxqs = xs.by_rule[static_cast<std::size_t>(frontend::XpsRule::Rxqs)].get();
            t.by_cpus = xs.by_rule[static_cast<std::size_t>(frontend::XpsRule::Cpus)].get();
            t.by_hash = xs.by_rule[static_cast<std::size_t>(frontend::XpsRule::Hash)].get();
            t.rxq_mismatch = xs.rxq_mismatch.get();
            t.copied = q->xps_copied.get();
            c.threads.push_back(std::move(t));
        }
    }
    return c;
}

}  // namespace pvnet::relay
