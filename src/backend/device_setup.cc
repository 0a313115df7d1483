// The device's control plane: features, memory table, per-vring setup,
// start, stop (vhost-user GET_VRING_BASE: stop processing, then report
// last_avail_idx) and reset, as Linux's vhost_dev_ioctl / vhost_vring_ioctl
// apply them and vhost-user's backend does per message. Every call runs
// between two worker rounds (lock_control); none is applied in part.
#include <algorithm>
#include <cstdio>
#include <new>

#include "pvnet/backend/net_device.h"
#include "pvnet/ring/ring_error.h"

namespace pvnet::backend {

std::string_view to_string(DeviceError e) noexcept {
    switch (e) {
        case DeviceError::System: return "eventfd, epoll or timerfd creation failed";
        case DeviceError::NoMemory: return "out of memory";
        case DeviceError::BadVring: return "vring index beyond the device's queues";
        case DeviceError::NotConfigured: return "vring or memory table not set up";
        case DeviceError::Running: return "the vring (or device) must be stopped first";
        case DeviceError::BadFeatures: return "features the device does not offer";
        case DeviceError::BadRing: return "ring size or addresses rejected";
        case DeviceError::PortRefused: return "a port refused the features' offloads";
        case DeviceError::Count: break;
    }
    return "unknown";
}

NetDevice::~NetDevice() = default;

Status<DeviceError> NetDevice::init(std::span<const PortFds> ports,
                                    std::span<const uint32_t> max_frames, bool tx_batch) noexcept {
    const std::size_t nworkers =
        opt_.workers == 0 ? ports.size() : std::min<std::size_t>(opt_.workers, ports.size());
    for (std::size_t w = 0; w < nworkers; ++w) {
        std::unique_ptr<Worker> wk(new (std::nothrow) Worker);
        if (!wk) return unexpected(DeviceError::NoMemory);
        wk->index = static_cast<uint16_t>(w);
        auto wake = notify::EventFd::create();
        auto ep = notify::Epoll::create();
        if (!wake || !ep) return unexpected(DeviceError::System);
        wk->wake.emplace(std::move(*wake));
        wk->epoll.emplace(std::move(*ep));
        if (!wk->epoll->add(wk->wake->fd(), tag(wk->index, kTagWake))) {
            return unexpected(DeviceError::System);
        }
        workers_.push_back(std::move(wk));
    }
    for (std::size_t i = 0; i < ports.size(); ++i) {
        std::unique_ptr<Pair> p(new (std::nothrow) Pair);
        if (!p) return unexpected(DeviceError::NoMemory);
        p->index = static_cast<uint16_t>(i);
        p->worker = static_cast<uint16_t>(i % nworkers);
        p->rx_chain.reset(new (std::nothrow) ring::DescChain);
        p->tx_chain.reset(new (std::nothrow) ring::DescChain);
        if (!p->rx_chain || !p->tx_chain) return unexpected(DeviceError::NoMemory);
        if (tx_batch) {
            p->tx_batch.reset(new (std::nothrow) TxBatch);
            if (!p->tx_batch) return unexpected(DeviceError::NoMemory);
        }
        auto rx_co = notify::Coalescer::create(opt_.rx_coalesce);
        auto tx_co = notify::Coalescer::create(opt_.tx_coalesce);
        if (!rx_co || !tx_co) return unexpected(DeviceError::System);
        p->rx.co = std::move(*rx_co);
        p->tx.co = std::move(*tx_co);
        VhostNetStats& s = p->stats;
        p->rx.calls = &s.rx_calls;
        p->rx.coalesced = &s.rx_signals_coalesced;
        p->rx.suppressed = &s.rx_signals_suppressed_event_idx;
        p->rx.timer_fires = &s.rx_coalesce_timer_fires;
        p->tx.calls = &s.tx_calls;
        p->tx.coalesced = &s.tx_signals_coalesced;
        p->tx.suppressed = &s.tx_signals_suppressed_event_idx;
        p->tx.timer_fires = &s.tx_coalesce_timer_fires;
        p->port = ports[i];
        if (i < max_frames.size() && max_frames[i] != 0) p->rx_max_frame = kHdrBytes + max_frames[i];
        const uint16_t pi = p->index;
        notify::Epoll& ep = *workers_[p->worker]->epoll;
        if (!ep.add(p->rx.co->timer_fd(), tag(pi, kTagRxTimer)) ||
            !ep.add(p->tx.co->timer_fd(), tag(pi, kTagTxTimer))) {
            return unexpected(DeviceError::System);
        }
        workers_[p->worker]->pairs.push_back(p.get());
        pairs_.push_back(std::move(p));
    }
    for (auto& w : workers_) w->round_work.assign(w->pairs.size(), 0);
    rx_steer_.emplace(max_pairs());
    rx_active_pairs_ = max_pairs();
    return {};
}

NetDevice::ControlLock NetDevice::lock_control() noexcept {
    // The workers look at ctl_waiting_ between rounds and step aside; the
    // wake gets each out of a sleep that would otherwise last up to 100 ms.
    ctl_waiting_.fetch_add(1, std::memory_order_relaxed);
    for (auto& w : workers_) w->wake->signal();
    ControlLock locks;
    locks.reserve(workers_.size());
    for (auto& w : workers_) locks.emplace_back(w->mu);
    ctl_waiting_.fetch_sub(1, std::memory_order_relaxed);
    dstats_.control_ops.add();
    return locks;
}

NetDevice::ControlLock NetDevice::lock_query() const noexcept {
    ctl_waiting_.fetch_add(1, std::memory_order_relaxed);
    ControlLock locks;
    locks.reserve(workers_.size());
    for (const auto& w : workers_) locks.emplace_back(w->mu);
    ctl_waiting_.fetch_sub(1, std::memory_order_relaxed);
    return locks;
}

std::unique_lock<std::mutex> NetDevice::lock_worker(Worker& w) noexcept {
    ctl_waiting_.fetch_add(1, std::memory_order_relaxed);
    w.wake->signal();
    std::unique_lock<std::mutex> lock(w.mu);
    ctl_waiting_.fetch_sub(1, std::memory_order_relaxed);
    return lock;
}

NetDevice::Worker& NetDevice::worker_of_tag(uint32_t t) noexcept {
    const uint32_t kind = t & ((1u << kTagShift) - 1u);
    const uint32_t i = t >> kTagShift;
    if (kind == kTagWake) return *workers_[i];
    if (kind == kTagCtrlKick || i >= pairs_.size()) return *workers_[0];
    return *workers_[pairs_[i]->worker];
}

NetDevice::Vring* NetDevice::vring_at(uint16_t i) noexcept {
    if (i >= ctrl_vring(max_pairs())) return nullptr;
    Pair& p = *pairs_[i / 2u];
    return i % 2u == 0 ? &p.rx : &p.tx;
}

const NetDevice::Vring* NetDevice::vring_at(uint16_t i) const noexcept {
    return const_cast<NetDevice*>(this)->vring_at(i);
}

bool NetDevice::all_stopped() const noexcept {
    for (const auto& p : pairs_) {
        if (p->rx.q || p->tx.q) return false;
    }
    return ctrl_ == nullptr;
}

void NetDevice::hoist_features() noexcept {
    mergeable_rx_ = virtio::has_feature(features_, virtio::VIRTIO_NET_F_MRG_RXBUF);
    rx_gso_ = virtio::has_feature(features_, virtio::VIRTIO_NET_F_GUEST_TSO4) ||
              virtio::has_feature(features_, virtio::VIRTIO_NET_F_GUEST_TSO6) ||
              virtio::has_feature(features_, virtio::VIRTIO_NET_F_GUEST_UFO);
    hash_report_ = virtio::has_feature(features_, virtio::VIRTIO_NET_F_HASH_REPORT);
    hdr_extra_ = hash_report_ ? virtio::kHashHdrExtraBytes : 0;
    // Rule (multiqueue steering): a driver with a control queue starts on one pair
    // (with MQ until VQ_PAIRS_SET; without, it has no other). Without one,
    // whoever emulates it (QEMU over vhost-user) enables the vrings in use.
    const bool ctrl_vq = virtio::has_feature(features_, virtio::VIRTIO_NET_F_CTRL_VQ);
    rx_steer_->reset(ctrl_vq ? 1 : max_pairs());
    sync_active_pairs();
}

bool NetDevice::features_ok(uint64_t features) const noexcept {
    if ((features & ~offered_features()) != 0) return false;
    if (virtio::has_feature(features, virtio::VIRTIO_NET_F_CTRL_VQ)) return true;
    // Rule (5.1.3.1): VIRTIO_NET_F_RSS requires VIRTIO_NET_F_CTRL_VQ; and
    // ("Device configuration layout") a driver SHOULD NOT negotiate
    // VIRTIO_NET_F_HASH_REPORT without it: no command could configure the hash.
    return !virtio::has_feature(features, virtio::VIRTIO_NET_F_RSS) &&
           !virtio::has_feature(features, virtio::VIRTIO_NET_F_HASH_REPORT);
}

void NetDevice::sync_active_pairs() noexcept {
    const uint16_t n = rx_steer_->active_pairs();
    if (n == rx_active_pairs_) return;
    rx_active_pairs_ = n;
    for (auto& p : pairs_) {
        sync_port_watch(*p);
        // Frames may be waiting on a port that was not watched.
        if (rx_serving(*p) && workers_[p->worker]->thread.joinable()) p->pending |= kRxWork;
    }
}

Status<DeviceError> NetDevice::set_features(uint64_t features) noexcept {
    const auto lock = lock_control();
    if (!all_stopped()) return unexpected(DeviceError::Running);
    if (!features_ok(features)) return unexpected(DeviceError::BadFeatures);
    if (!apply_port_features(features)) return unexpected(DeviceError::PortRefused);
    features_ = features;
    hoist_features();
    return {};
}

Status<DeviceError> NetDevice::set_mem_table(const mem::MemoryTable* table) noexcept {
    const auto lock = lock_control();
    // The queues keep pointers into the table's mappings (the hot region).
    if (!all_stopped()) return unexpected(DeviceError::Running);
    mem_ = table;
    return {};
}

Status<DeviceError> NetDevice::set_vring(uint16_t i, const VringSetup& s) noexcept {
    const auto lock = lock_control();
    if (i == ctrl_vring(max_pairs())) {
        if (ctrl_) return unexpected(DeviceError::Running);
        ctrl_setup_ = s;
        ctrl_configured_ = true;
        return {};
    }
    Vring* v = vring_at(i);
    if (v == nullptr) return unexpected(DeviceError::BadVring);
    if (v->q) return unexpected(DeviceError::Running);
    v->setup = s;
    v->configured = true;
    return {};
}

Status<DeviceError> NetDevice::set_vring_call(uint16_t i, const notify::EventFd* call) noexcept {
    const auto lock = lock_control();
    if (i == ctrl_vring(max_pairs())) {
        // CtrlQueue keeps its fds from start: a running one must restart.
        if (ctrl_) return unexpected(DeviceError::Running);
        ctrl_setup_.call = call;
        return {};
    }
    Vring* v = vring_at(i);
    if (v == nullptr) return unexpected(DeviceError::BadVring);
    // tx's signal path may run in process_tx_now's thread.
    const std::lock_guard<std::mutex> tx_lock(pairs_[i / 2u]->tx_mu);
    v->setup.call = call;
    return {};
}

Status<DeviceError> NetDevice::set_tx_vring_enabled(uint16_t i, bool enabled) noexcept {
    const auto lock = lock_control();
    Vring* v = i % 2u == 1u ? vring_at(i) : nullptr;
    if (v == nullptr) return unexpected(DeviceError::BadVring);
    // run_tx reads it under tx_mu, in the worker or process_tx_now's thread.
    const std::lock_guard<std::mutex> tx_lock(pairs_[i / 2u]->tx_mu);
    v->setup.enabled = enabled;
    return {};
}

Status<DeviceError> NetDevice::start_vring(uint16_t i) noexcept {
    const auto lock = lock_control();
    return start_locked(i);
}

Status<DeviceError> NetDevice::start_locked(uint16_t i) noexcept {
    if (mem_ == nullptr) return unexpected(DeviceError::NotConfigured);
    if (i == ctrl_vring(max_pairs())) {
        if (!virtio::has_feature(features_, virtio::VIRTIO_NET_F_CTRL_VQ)) {
            return unexpected(DeviceError::BadVring);
        }
        if (!ctrl_configured_) return unexpected(DeviceError::NotConfigured);
        if (ctrl_) return unexpected(DeviceError::Running);
        CtrlQueueConfig cc;
        cc.ring.addrs = ctrl_setup_.addrs;
        cc.ring.features = features_;
        cc.ring.last_avail_idx = ring::RingIdx(ctrl_setup_.base.last_avail_idx);
        cc.max_pairs = max_pairs();
        auto c = CtrlQueue::create(*mem_, cc, notify::QueueFds{ctrl_setup_.kick, ctrl_setup_.call});
        if (!c) {
            ctrl_error_ = c.error();
            return unexpected(DeviceError::BadRing);
        }
        ctrl_ = std::move(*c);
        ctrl_reported_ = false;
        ctrl_error_ = ring::RingError::Count;
        if (ctrl_setup_.kick != nullptr) epoll_watch(ctrl_setup_.kick->fd(), tag(0, kTagCtrlKick), notify::kEpollIn);
        ctrl_pending_ = true;
        return {};
    }
    Vring* v = vring_at(i);
    if (v == nullptr) return unexpected(DeviceError::BadVring);
    if (!v->configured) return unexpected(DeviceError::NotConfigured);
    if (v->q) return unexpected(DeviceError::Running);
    Pair& p = *pairs_[i / 2u];
    const bool is_tx = i % 2u != 0;
    ring::DeviceQueueConfig qc;
    qc.addrs = v->setup.addrs;
    qc.features = features_;
    qc.last_avail_idx = ring::RingIdx(v->setup.base.last_avail_idx);
    qc.buffers = v->setup.buffers;
    qc.inflight = v->setup.inflight;
    auto q = ring::SplitDeviceQueue::create(*mem_, qc);
    if (!q) {
        v->error = q.error();
        return unexpected(DeviceError::BadRing);
    }
    if (!is_tx && mergeable_rx_ && !p.rx_bufs) {
        p.rx_bufs.reset(new (std::nothrow) RxBufs);
        if (!p.rx_bufs) return unexpected(DeviceError::NoMemory);
    }
    if (std::unique_ptr<CutIov>& cut = is_tx ? p.tx_cut : p.rx_cut; hash_report_ && !cut) {
        // tx_cut's owner is tx_mu, but no tx run can reach it: the vring is stopped.
        cut.reset(new (std::nothrow) CutIov);
        if (!cut) return unexpected(DeviceError::NoMemory);
    }
    {
        const std::lock_guard<std::mutex> tx_lock(p.tx_mu);  // process_tx_now sees q under it
        v->q = std::move(*q);
        // Chains a dead predecessor left in flight came back used (length 0):
        // count them, and tell the driver, who may be waiting for them.
        if (const uint64_t n = v->q->stats().inflight_dropped.get(); n != 0) {
            (is_tx ? p.stats.tx_inflight_dropped : p.stats.rx_inflight_dropped).add(n);
            raise(*v);
        }
    }
    v->reported = false;
    v->error = ring::RingError::Count;
    const uint16_t pi = p.index;
    if (v->setup.kick != nullptr) {
        epoll_watch(v->setup.kick->fd(), tag(pi, is_tx ? kTagTxKick : kTagRxKick), notify::kEpollIn);
    }
    if (!is_tx) {
        p.rx_short_pending = 0;
        p.port_want_rx = true;
        port_session(p, true);
    }
    sync_port_watch(p);
    // Chains may have been added while the ring was stopped: a running
    // worker looks at once (a new one looks at every ring when it starts).
    if (workers_[p.worker]->thread.joinable()) p.pending |= is_tx ? kTxWork : kRxWork;
    return {};
}

void NetDevice::stop_data_vring(Pair& p, Vring& v, bool is_tx) noexcept {
    if (!v.q) return;
    // A direct-path run may be in the tx ring's loop: the flush, the base and
    // the reset wait for its end, or the base misses the chains it pops
    // meanwhile and its coalescer and signal path are shared unguarded.
    const std::lock_guard<std::mutex> tx_lock(p.tx_mu);
    // Used entries published but held back by coalescing are signalled now:
    // the driver must not wait for a timer of a stopped ring.
    if (v.co->pending() != 0) {
        (void)v.co->set(v.co->params());
        raise(v);
    }
    if (v.setup.kick != nullptr && !v.reported) {
        epoll_forget(v.setup.kick->fd(), tag(p.index, is_tx ? kTagTxKick : kTagRxKick));
    }
    v.setup.base.last_avail_idx = v.q->last_avail_idx().value();
    v.q.reset();
    if (is_tx) p.tx_wait_writable.store(false, std::memory_order_relaxed);
    sync_port_watch(p);
    p.pending &= is_tx ? ~kTxWork : ~kRxWork;
}

VringBase NetDevice::stop_locked(uint16_t i) noexcept {
    if (i == ctrl_vring(max_pairs())) {
        if (ctrl_) {
            if (ctrl_setup_.kick != nullptr) epoll_forget(ctrl_setup_.kick->fd(), tag(0, kTagCtrlKick));
            ctrl_setup_.base.last_avail_idx = ctrl_->queue().last_avail_idx().value();
            ctrl_.reset();
            ctrl_pending_ = false;
        }
        return ctrl_setup_.base;
    }
    Vring* v = vring_at(i);
    stop_data_vring(*pairs_[i / 2u], *v, i % 2u != 0);
    return v->setup.base;
}

Result<VringBase, DeviceError> NetDevice::stop_vring(uint16_t i) noexcept {
    const auto lock = lock_control();
    if (i > ctrl_vring(max_pairs())) return unexpected(DeviceError::BadVring);
    return stop_locked(i);
}

Status<DeviceError> NetDevice::configure(const DeviceSetup& s) noexcept {
    const auto lock = lock_control();
    if (!all_stopped()) return unexpected(DeviceError::Running);
    if (!features_ok(s.features)) return unexpected(DeviceError::BadFeatures);
    if (s.mem == nullptr) return unexpected(DeviceError::NotConfigured);
    const bool ctrl = virtio::has_feature(s.features, virtio::VIRTIO_NET_F_CTRL_VQ);
    if (s.vrings.size() > num_vrings() || s.vrings.size() % 2u != (ctrl ? 1u : 0u) ||
        (ctrl && s.vrings.size() != num_vrings())) {
        return unexpected(DeviceError::BadVring);
    }
    if (!apply_port_features(s.features)) return unexpected(DeviceError::PortRefused);
    features_ = s.features;
    hoist_features();
    mem_ = s.mem;
    for (std::size_t i = 0; i < s.vrings.size(); ++i) {
        const auto idx = static_cast<uint16_t>(i);
        if (idx == ctrl_vring(max_pairs())) {
            ctrl_setup_ = s.vrings[i];
            ctrl_configured_ = true;
        } else {
            Vring& v = *vring_at(idx);
            v.setup = s.vrings[i];
            v.configured = true;
        }
    }
    for (std::size_t i = 0; i < s.vrings.size(); ++i) {
        if (!s.vrings[i].enabled) continue;
        if (auto st = start_locked(static_cast<uint16_t>(i)); !st) {
            for (uint16_t k = 0; k < num_vrings(); ++k) (void)stop_locked(k);
            return st;
        }
    }
    return {};
}

void NetDevice::reset() noexcept {
    const auto lock = lock_control();
    for (uint16_t k = 0; k < num_vrings(); ++k) (void)stop_locked(k);
    for (auto& p : pairs_) {
        for (Vring* v : {&p->rx, &p->tx}) {
            v->setup = VringSetup{};
            v->configured = false;
            v->reported = false;
            v->error = ring::RingError::Count;
        }
        p->port_dead = false;
        p->pending = 0;
        port_session(*p, false);
    }
    ctrl_setup_ = VringSetup{};
    ctrl_configured_ = false;
    ctrl_error_ = ring::RingError::Count;
    features_ = 0;
    hoist_features();
    mem_ = nullptr;
    needs_reset_.store(false, std::memory_order_relaxed);
}

bool NetDevice::vring_started(uint16_t i) const noexcept {
    const auto lock = lock_query();
    if (i == ctrl_vring(max_pairs())) return ctrl_ != nullptr;
    const Vring* v = vring_at(i);
    return v != nullptr && v->q != nullptr;
}

bool NetDevice::vring_broken(uint16_t i) const noexcept {
    const auto lock = lock_query();
    if (i == ctrl_vring(max_pairs())) return ctrl_ != nullptr && ctrl_->queue().broken();
    const Vring* v = vring_at(i);
    return v != nullptr && v->q != nullptr && v->q->broken();
}

ring::RingError NetDevice::vring_error(uint16_t i) const noexcept {
    const auto lock = lock_query();
    if (i == ctrl_vring(max_pairs())) {
        return ctrl_ && ctrl_->queue().broken() ? ctrl_->queue().broken_reason() : ctrl_error_;
    }
    const Vring* v = vring_at(i);
    if (v == nullptr) return ring::RingError::Count;
    return v->q && v->q->broken() ? v->q->broken_reason() : v->error;
}

bool NetDevice::report_broken(uint16_t index, const ring::SplitDeviceQueue& q,
                              const VringSetup& s, uint32_t kick_tag, bool& reported,
                              ring::RingError& error) noexcept {
    // broken() is a relaxed atomic: the direct path may be the one that broke tx.
    if (reported || !q.broken()) return false;
    reported = true;
    error = q.broken_reason();
    count(dstats_.vrings_broken);
    needs_reset_.store(true, std::memory_order_relaxed);
    // No std::string: this runs noexcept on the worker, where an allocation
    // that fails under memory pressure would end in std::terminate.
    const std::string_view why = ring::to_string(error);
    std::fprintf(stderr, "pvnet backend: vring %u broken (%.*s): device needs reset\n",
                 unsigned{index}, static_cast<int>(why.size()), why.data());
    if (s.err != nullptr) s.err->signal();
    // A broken ring is never touched again: its kicks must not wake us.
    if (s.kick != nullptr) epoll_forget(s.kick->fd(), kick_tag);
    return true;
}

void NetDevice::check_broken(Pair& p) noexcept {
    const uint16_t pi = p.index;
    bool changed = false;
    if (p.rx.q && report_broken(rx_vring(pi), *p.rx.q, p.rx.setup, tag(pi, kTagRxKick),
                                p.rx.reported, p.rx.error)) {
        p.pending &= ~kRxWork;
        changed = true;
    }
    if (p.tx.q && report_broken(tx_vring(pi), *p.tx.q, p.tx.setup, tag(pi, kTagTxKick),
                                p.tx.reported, p.tx.error)) {
        p.tx_wait_writable.store(false, std::memory_order_relaxed);
        p.pending &= ~kTxWork;
        changed = true;
    }
    // Nothing can take the port's frames now: a readable fd would spin us.
    if (changed) sync_port_watch(p);
}

void NetDevice::check_ctrl_broken() noexcept {
    if (ctrl_ && report_broken(ctrl_vring(max_pairs()), ctrl_->queue(), ctrl_setup_,
                               tag(0, kTagCtrlKick), ctrl_reported_, ctrl_error_)) {
        ctrl_pending_ = false;
    }
}

void NetDevice::epoll_watch(int fd, uint32_t t, uint32_t events) noexcept {
    // Level-triggered; an fd already registered (a kick shared by two
    // vrings is a setup error the guest can make) is re-tagged.
    notify::Epoll& ep = *worker_of_tag(t).epoll;
    if (!ep.add(fd, t, events)) (void)ep.modify(fd, t, events);
}

void NetDevice::epoll_forget(int fd, uint32_t t) noexcept { (void)worker_of_tag(t).epoll->remove(fd); }

}  // namespace pvnet::backend
