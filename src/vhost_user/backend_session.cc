// The vhost-user request handlers (backend_session.h has the rules; QEMU
// docs/interop/vhost-user.rst is the spec, DPDK lib/vhost/vhost_user.c the model).
#include "pvnet/vhost_user/backend_session.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "pvnet/ring/inflight.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::vhost_user {

using backend::DeviceError;

namespace {
constexpr uint64_t mq_feature() noexcept { return virtio::feature_mask(virtio::VIRTIO_NET_F_MQ); }
}  // namespace

uint64_t session_features(const backend::NetDevice& dev, bool ctrl_vq) noexcept {
    if (ctrl_vq) return dev.offered_features() | bit(kFProtocolFeatures);
    // The control queue's features: QEMU emulates that queue, so their
    // commands (RSS_CONFIG and HASH_CONFIG among them) would never reach the
    // device, and a hash report would report a hash nobody configured.
    const uint64_t ctrl = virtio::feature_mask(virtio::VIRTIO_NET_F_CTRL_VQ) |
                          virtio::feature_mask(virtio::VIRTIO_NET_F_NOTF_COAL) |
                          virtio::feature_mask(virtio::VIRTIO_NET_F_RSS) |
                          virtio::feature_mask(virtio::VIRTIO_NET_F_HASH_REPORT);
    // QEMU steers among the pairs (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET in its own control
    // queue) by enabling vrings; the device only serves the vrings it is given.
    const uint64_t mq = dev.max_pairs() > 1 ? mq_feature() : 0;
    return (dev.offered_features() & ~(ctrl | mq_feature())) | mq | bit(kFProtocolFeatures);
}

class BackendSession::Fds {
public:
    explicit Fds(std::span<const int> fds) noexcept : n_(std::min(fds.size(), fd_.size())) {
        std::copy_n(fds.begin(), n_, fd_.begin());
        for (std::size_t i = n_; i < fds.size(); ++i) ::close(fds[i]);  // never kept
    }
    ~Fds() {
        for (std::size_t i = 0; i < n_; ++i) {
            if (fd_[i] >= 0) ::close(fd_[i]);
        }
    }
    Fds(const Fds&) = delete;
    Fds& operator=(const Fds&) = delete;
    std::size_t size() const noexcept { return n_; }
    int take(std::size_t i) noexcept { return std::exchange(fd_[i], -1); }

private:
    std::array<int, kMaxFds> fd_{};
    std::size_t n_ = 0;
};

BackendSession::BackendSession(backend::NetDevice& dev, const ServerConfig& cfg,
                               SessionStats& stats) noexcept
    : dev_(dev), cfg_(cfg), stats_(stats) {
    vrings_.resize(2u * dev.max_pairs() + (cfg.ctrl_vq ? 1u : 0u));
}

BackendSession::~BackendSession() { stop_all_and_reset(); }

void BackendSession::stop_all_and_reset() noexcept {
    for (uint16_t i = 0; i < vrings_.size(); ++i) stop(i);
    // The device forgets the memory table and fds before they are released.
    dev_.reset();
}

bool BackendSession::header_ok(const MsgHeader& h) noexcept {
    if ((h.flags & kVersionMask) != kVersion || (h.flags & kFlagReply) != 0 ||
        h.size > kMaxPayload) {
        stats_.bad_header.add();
        return false;
    }
    return true;
}

BackendSession::Snapshot BackendSession::snapshot() const {
    Snapshot s{features_, protocol_features_, status_, features_set_, mtu_, {}, mem_.get(),
               inflight_.get()};
    const auto fd = [](const std::unique_ptr<notify::EventFd>& e) { return e ? e->fd() : -1; };
    for (const Vring& v : vrings_) {
        s.vrings.push_back({v.num, v.base, v.has_addr, v.kick_set, v.enabled, v.started,
                            v.addrs.desc.value, v.addrs.avail.value, v.addrs.used.value,
                            fd(v.kick), fd(v.call), fd(v.err)});
    }
    return s;
}

bool BackendSession::ring_enabled(const Vring& v) const noexcept {
    return (features_ & bit(kFProtocolFeatures)) == 0 || v.enabled;
}

bool BackendSession::is_tx(uint16_t i) const noexcept {
    return i % 2u == 1u && i < backend::ctrl_vring(dev_.max_pairs());
}

bool BackendSession::any_started() const noexcept {
    return std::any_of(vrings_.begin(), vrings_.end(), [](const Vring& v) { return v.started; });
}

bool BackendSession::maybe_start(uint16_t i) noexcept {
    Vring& v = vrings_[i];
    // A ring starts enabled. One not yet enabled waits, so no frame is discarded
    // in the window QEMU and pvnet's front-end leave between SET_VRING_KICK and
    // SET_VRING_ENABLE (a restart replays it under traffic); DPDK waits as well.
    if (v.started || v.num == 0 || !v.has_addr || !mem_ || !v.kick_set || !ring_enabled(v)) {
        return true;
    }
    backend::VringSetup s;
    s.addrs = v.addrs;
    s.addrs.size = v.num;
    s.base.last_avail_idx = v.base;
    s.kick = v.kick.get();
    s.call = v.call.get();
    s.err = v.err.get();
    s.enabled = true;
    const bool ctrl = i == backend::ctrl_vring(dev_.max_pairs());
    // The control vring runs only when CTRL_VQ was negotiated.
    if (ctrl && !virtio::has_feature(features_, virtio::VIRTIO_NET_F_CTRL_VQ)) return false;
    // The control queue's commands are not logged: a restarted device never redoes one.
    if (inflight_ && !ctrl && i < inflight_->num_queues) {
        // Rule: a log is laid out for one ring size.
        if (inflight_->queue_size != v.num) {
            stats_.inflight_bad_log.add();
            return false;
        }
        s.inflight = {inflight_->map.host() + i * inflight_->queue_bytes, inflight_->queue_bytes};
    }
    if (!dev_.set_vring(i, s)) return false;
    if (!dev_.start_vring(i)) {
        const ring::RingError e = dev_.vring_error(i);
        if (e == ring::RingError::InflightBadLog || e == ring::RingError::InflightBadUsed ||
            e == ring::RingError::InflightTooMany) {
            stats_.inflight_bad_log.add();
        }
        return false;
    }
    v.started = true;
    stats_.rings_started.add();
    return true;
}

void BackendSession::stop(uint16_t i) noexcept {
    Vring& v = vrings_[i];
    if (!v.started) return;
    if (auto b = dev_.stop_vring(i)) v.base = b->last_avail_idx;
    v.started = false;
    stats_.rings_stopped.add();
}

namespace {

/// The fds a request must carry (SET_MEM_TABLE's are checked with its payload).
std::size_t expected_fds(Request r, std::span<const std::byte> p) noexcept {
    switch (r) {
        case Request::SetVringKick:
        case Request::SetVringCall:
        case Request::SetVringErr: {
            uint64_t v = 0;
            if (p.size() != sizeof v) return 0;
            std::memcpy(&v, p.data(), sizeof v);
            return (v & kVringNoFdMask) != 0 ? 0 : 1;
        }
        case Request::SetInflightFd: return 1;
        default: return 0;
    }
}

/// The payload size a fixed-size request must have, or -1 for none checked here.
long expected_size(Request r) noexcept {
    switch (r) {
        case Request::GetFeatures:
        case Request::GetProtocolFeatures:
        case Request::GetQueueNum:
        case Request::GetStatus:
        case Request::SetOwner:
        case Request::ResetOwner: return 0;
        case Request::SetFeatures:
        case Request::SetProtocolFeatures:
        case Request::SetVringKick:
        case Request::SetVringCall:
        case Request::SetVringErr:
        case Request::SetStatus:
        case Request::NetSetMtu: return sizeof(uint64_t);
        case Request::SetVringNum:
        case Request::SetVringBase:
        case Request::GetVringBase:
        case Request::SetVringEnable: return sizeof(VringState);
        case Request::SetVringAddr: return sizeof(VringAddr);
        case Request::GetInflightFd:
        case Request::SetInflightFd: return sizeof(InflightInfo);
        default: return -1;
    }
}

/// The protocol feature a request needs negotiated (vhost-user.rst: sent only
/// when it is), or 0.
uint64_t needed_protocol_feature(Request r) noexcept {
    switch (r) {
        case Request::GetInflightFd:
        case Request::SetInflightFd: return bit(kProtoInflightShmfd);
        case Request::SetStatus:
        case Request::GetStatus: return bit(kProtoStatus);
        case Request::NetSetMtu: return bit(kProtoNetMtu);
        default: return 0;
    }
}

bool is_get(Request r) noexcept {
    return r == Request::GetFeatures || r == Request::GetProtocolFeatures ||
           r == Request::GetQueueNum || r == Request::GetStatus || r == Request::GetVringBase ||
           r == Request::GetInflightFd;
}

}  // namespace

Outcome BackendSession::handle(const MsgHeader& h, std::span<const std::byte> payload,
                               std::span<const int> fd_list) noexcept {
    Fds fds(fd_list);
    Outcome out;
    if (!header_ok(h) || payload.size() != h.size || fd_list.size() > kMaxFds) {
        if (fd_list.size() > kMaxFds) stats_.bad_fds.add();
        stats_.rejected.add();
        out.close = true;
        return out;
    }
    stats_.messages.add();
    const auto r = static_cast<Request>(h.request);
    uint64_t reply = 0;
    bool has_reply = false;
    const Fail f = dispatch(r, payload, fds, reply, has_reply);
    const bool ack = (protocol_features_ & bit(kProtoReplyAck)) != 0 &&
                     (h.flags & kFlagNeedReply) != 0 && !is_get(r);
    if (f != Fail::None) {
        stats_.rejected.add();
        switch (f) {
            case Fail::Payload: stats_.bad_payload.add(); break;
            case Fail::Fds: stats_.bad_fds.add(); break;
            case Fail::FdType: stats_.bad_fd_type.add(); break;
            case Fail::State: stats_.bad_state.add(); break;
            case Fail::Unsupported: stats_.unsupported.add(); break;
            case Fail::None: break;
        }
        if (!ack) {
            out.close = true;
            return out;
        }
        reply = 1;
        has_reply = true;
    } else if (ack) {
        reply = 0;
        has_reply = true;
    }
    if (has_reply) {
        // GET_VRING_BASE's VringState is a u64's size; GET_INFLIGHT_FD's reply is its own.
        const bool inflight = r == Request::GetInflightFd && f == Fail::None;
        const uint32_t size = static_cast<uint32_t>(inflight ? sizeof(InflightInfo)
                                                             : sizeof(uint64_t));
        const MsgHeader rh{h.request, kVersion | kFlagReply, size};
        std::memcpy(out.reply.data(), &rh, sizeof rh);
        if (inflight) {
            std::memcpy(out.reply.data() + sizeof rh, &inflight_reply_, sizeof inflight_reply_);
            out.reply_fd = inflight_->map.fd();
        } else {
            std::memcpy(out.reply.data() + sizeof rh, &reply, sizeof reply);
        }
        out.reply_len = sizeof rh + size;
        stats_.replies.add();
    }
    return out;
}

BackendSession::Fail BackendSession::dispatch(Request r, std::span<const std::byte> p, Fds& fds,
                                              uint64_t& reply, bool& has_reply) noexcept {
    const long want = expected_size(r);
    if (r == Request::SetMemTable) return set_mem_table(p, fds);
    if (want < 0) return Fail::Unsupported;
    if ((protocol_features_ & needed_protocol_feature(r)) != needed_protocol_feature(r)) {
        return Fail::Unsupported;
    }
    if (p.size() != static_cast<std::size_t>(want)) return Fail::Payload;
    if (fds.size() != expected_fds(r, p)) return Fail::Fds;

    uint64_t u64 = 0;
    VringState st;
    const bool vring_state = r == Request::SetVringNum || r == Request::SetVringBase ||
                             r == Request::GetVringBase || r == Request::SetVringEnable;
    if (want == sizeof u64) std::memcpy(&u64, p.data(), sizeof u64);
    if (vring_state) {
        std::memcpy(&st, p.data(), sizeof st);
        if (st.index >= vrings_.size()) return Fail::Payload;  // checked before any narrowing
    }
    switch (r) {
        case Request::GetFeatures:
            reply = session_features(dev_, cfg_.ctrl_vq);
            has_reply = true;
            return Fail::None;
        case Request::SetFeatures: return set_features(u64);
        case Request::GetProtocolFeatures:
            reply = kBackendProtocolFeatures & ~(cfg_.max_mtu == 0 ? bit(kProtoNetMtu) : 0);
            has_reply = true;
            return Fail::None;
        case Request::SetProtocolFeatures:
            if ((u64 & ~kBackendProtocolFeatures) != 0 ||
                (cfg_.max_mtu == 0 && (u64 & bit(kProtoNetMtu)) != 0)) {
                return Fail::Unsupported;
            }
            protocol_features_ = u64;
            return Fail::None;
        case Request::SetOwner: return Fail::None;
        case Request::ResetOwner:
            stop_all_and_reset();
            for (Vring& v : vrings_) v = Vring{};
            mem_.reset();
            inflight_.reset();
            features_ = 0;
            features_set_ = false;
            return Fail::None;
        case Request::GetQueueNum:
            reply = dev_.max_pairs();
            has_reply = true;
            return Fail::None;
        case Request::SetStatus:
            if (u64 > 0xff) return Fail::Payload;
            status_ = u64;
            return Fail::None;
        case Request::GetStatus:
            reply = status_ | dev_.status();
            has_reply = true;
            return Fail::None;
        case Request::NetSetMtu:
            // NET_MTU (needed above) is offered only with a max_mtu.
            if (u64 < 68 || u64 > cfg_.max_mtu) return Fail::Payload;
            mtu_ = static_cast<uint16_t>(u64);
            return Fail::None;
        case Request::SetVringNum: {
            Vring& v = vrings_[st.index];
            if (v.started) return Fail::State;
            if (st.num == 0 || st.num > 32768 || (st.num & (st.num - 1)) != 0) {
                return Fail::Payload;
            }
            v.num = static_cast<uint16_t>(st.num);
            return maybe_start(static_cast<uint16_t>(st.index)) ? Fail::None : Fail::Payload;
        }
        case Request::SetVringBase: {
            Vring& v = vrings_[st.index];
            if (v.started) return Fail::State;
            if (st.num > 0xffff) return Fail::Payload;
            v.base = static_cast<uint16_t>(st.num);
            return Fail::None;
        }
        case Request::GetVringBase: {
            const auto i = static_cast<uint16_t>(st.index);
            stop(i);
            // The ring restarts on the next SET_VRING_KICK (vhost-user.rst "Starting and
            // stopping rings"); its kick fd is done with.
            vrings_[i].kick.reset();
            vrings_[i].kick_set = false;
            const VringState ans{st.index, vrings_[i].base};
            std::memcpy(&reply, &ans, sizeof ans);
            has_reply = true;
            return Fail::None;
        }
        case Request::SetVringEnable: {
            if (st.num > 1) return Fail::Payload;
            const auto i = static_cast<uint16_t>(st.index);
            Vring& v = vrings_[i];
            // vhost-user.rst "Ring states": a started ring that is disabled is still
            // processed, without side effects: tx consumes and discards; rx (and
            // the control queue) is stopped: it supplies nothing.
            if (v.started && is_tx(i) && (features_ & bit(kFProtocolFeatures)) != 0) {
                if (!dev_.set_tx_vring_enabled(i, st.num == 1)) return Fail::State;
                v.enabled = st.num == 1;
                return Fail::None;
            }
            v.enabled = st.num == 1;
            if (!ring_enabled(v)) stop(i);
            return maybe_start(i) ? Fail::None : Fail::Payload;
        }
        case Request::SetVringAddr: {
            VringAddr a;
            std::memcpy(&a, p.data(), sizeof a);
            return set_vring_addr(a);
        }
        case Request::SetVringKick:
        case Request::SetVringCall:
        case Request::SetVringErr: return set_vring_fd(r, u64, fds);
        case Request::GetInflightFd:
        case Request::SetInflightFd: {
            InflightInfo info;
            std::memcpy(&info, p.data(), sizeof info);
            if (r == Request::GetInflightFd) {
                const Fail f = get_inflight_fd(info);
                has_reply = f == Fail::None;
                return f;
            }
            return set_inflight_fd(info, fds);
        }
        default: return Fail::Unsupported;
    }
}

BackendSession::Fail BackendSession::set_features(uint64_t f) noexcept {
    if ((f & ~session_features(dev_, cfg_.ctrl_vq)) != 0) return Fail::Unsupported;
    // QEMU with queues=N repeats the whole setup once per queue pair.
    if (features_set_ && f == features_) return Fail::None;
    if (any_started()) return Fail::State;
    // MQ stays QEMU's: without CTRL_VQ the device serves every pair it is given.
    // Without the device's control queue MQ stays QEMU's (it steers by enabling vrings).
    const uint64_t keep_mq = cfg_.ctrl_vq ? mq_feature() : 0;
    if (!dev_.set_features(f & ~(bit(kFProtocolFeatures) | (mq_feature() & ~keep_mq)))) {
        return Fail::Payload;
    }
    features_ = f;
    features_set_ = true;
    return Fail::None;
}

bool BackendSession::user_to_guest(uint64_t uva, uint64_t& gpa) const noexcept {
    if (!mem_) return false;
    for (const MemRegion& m : mem_->wire) {
        if (uva >= m.userspace_addr && uva - m.userspace_addr < m.memory_size) {
            gpa = m.guest_phys_addr + (uva - m.userspace_addr);
            return true;
        }
    }
    return false;
}

BackendSession::Fail BackendSession::set_vring_addr(const VringAddr& a) noexcept {
    if (a.index >= vrings_.size()) return Fail::Payload;
    if (a.flags != 0) return Fail::Unsupported;  // logging is not offered
    if (!mem_) return Fail::State;
    Vring& v = vrings_[a.index];
    if (v.started) return Fail::State;
    uint64_t desc = 0, avail = 0, used = 0;
    if (!user_to_guest(a.desc_user_addr, desc) || !user_to_guest(a.avail_user_addr, avail) ||
        !user_to_guest(a.used_user_addr, used)) {
        return Fail::Payload;
    }
    v.addrs.desc = mem::GuestAddr(desc);
    v.addrs.avail = mem::GuestAddr(avail);
    v.addrs.used = mem::GuestAddr(used);
    v.has_addr = true;
    return maybe_start(static_cast<uint16_t>(a.index)) ? Fail::None : Fail::Payload;
}

BackendSession::Fail BackendSession::set_vring_fd(Request r, uint64_t v, Fds& fds) noexcept {
    if ((v & ~(kVringIdxMask | kVringNoFdMask)) != 0) return Fail::Payload;
    const uint64_t idx = v & kVringIdxMask;
    if (idx >= vrings_.size()) return Fail::Payload;
    const auto i = static_cast<uint16_t>(idx);
    Vring& ring = vrings_[i];
    std::unique_ptr<notify::EventFd> efd;
    if ((v & kVringNoFdMask) == 0) {
        // Rule: an eventfd, and a kick not in semaphore mode; never blocks
        // us whatever the front-end does to its flags later (event_fd.h).
        auto e = notify::EventFd::from_peer(fds.take(0), r == Request::SetVringKick
                                                             ? notify::PeerUse::Kick
                                                             : notify::PeerUse::Notify);
        if (!e) return Fail::FdType;
        efd = std::make_unique<notify::EventFd>(std::move(*e));
    }
    if (r == Request::SetVringCall) {
        if (ring.started && !dev_.set_vring_call(i, efd.get())) return Fail::State;
        ring.call = std::move(efd);  // the old one closes after the device let go of it
        return Fail::None;
    }
    if (r == Request::SetVringKick && !mem_) return Fail::State;
    stop(i);
    if (r == Request::SetVringKick) {
        ring.kick = std::move(efd);
        ring.kick_set = true;
    } else {
        ring.err = std::move(efd);
    }
    return maybe_start(i) ? Fail::None : Fail::Payload;
}

BackendSession::Fail BackendSession::set_mem_table(std::span<const std::byte> p,
                                                   Fds& fds) noexcept {
    MemTable t;
    if (p.size() < 8) return Fail::Payload;
    std::memcpy(&t.nregions, p.data(), sizeof t.nregions);
    if (t.nregions == 0 || t.nregions > kMaxMemRegions || p.size() != 8 + 32 * t.nregions) {
        return Fail::Payload;
    }
    if (fds.size() != t.nregions) return Fail::Fds;
    std::memcpy(t.regions, p.data() + 8, 32 * t.nregions);
    const std::span<const MemRegion> regs(t.regions, t.nregions);
    for (const MemRegion& m : regs) {
        const uint64_t last = m.memory_size - 1;
        if (m.memory_size == 0 || m.guest_phys_addr > UINT64_MAX - last ||
            m.userspace_addr > UINT64_MAX - last || m.mmap_offset > UINT64_MAX - m.memory_size) {
            return Fail::Payload;
        }
    }
    for (std::size_t a = 0; a < regs.size(); ++a) {
        for (std::size_t b = a + 1; b < regs.size(); ++b) {
            const auto overlap = [](uint64_t x, uint64_t xs, uint64_t y, uint64_t ys) {
                return x <= y + (ys - 1) && y <= x + (xs - 1);
            };
            if (overlap(regs[a].guest_phys_addr, regs[a].memory_size, regs[b].guest_phys_addr,
                        regs[b].memory_size) ||
                overlap(regs[a].userspace_addr, regs[a].memory_size, regs[b].userspace_addr,
                        regs[b].memory_size)) {
                return Fail::Payload;
            }
        }
    }
    if (mem_ && mem_->wire.size() == regs.size() &&
        std::equal(regs.begin(), regs.end(), mem_->wire.begin(),
                   [](const MemRegion& x, const MemRegion& y) {
                       return std::memcmp(&x, &y, sizeof x) == 0;
                   })) {
        stats_.mem_table_same.add();
        return Fail::None;
    }

    auto m = std::make_unique<Memory>();
    for (std::size_t k = 0; k < regs.size(); ++k) {
        const MemRegion& w = regs[k];
        const int fd = fds.take(k);
        // Mapped from the granule (page, or huge page) holding mmap_offset.
        const uint64_t granule = mem::MemoryRegion::map_granule(fd);
        const uint64_t aligned = granule == 0 ? 0 : w.mmap_offset / granule * granule;
        const uint64_t delta = w.mmap_offset - aligned;
        if (w.memory_size > UINT64_MAX - delta) {
            ::close(fd);
            return Fail::Payload;
        }
        auto r = mem::MemoryRegion::map_fd(fd, w.memory_size + delta, aligned);
        if (!r) return r.error() == mem::MemError::BadFd ? Fail::FdType : Fail::Payload;
        std::byte* host = r->host() + delta;
        if (!m->table.add(mem::GuestAddr(w.guest_phys_addr), {host, w.memory_size})) {
            return Fail::Payload;
        }
        m->hosts.push_back(host);
        m->maps.push_back(std::move(r.value()));
        m->wire.push_back(w);
    }
    // A new table while rings run (memory hot-plug): stop them, swap, restart from their bases.
    std::vector<uint16_t> running;
    for (uint16_t i = 0; i < vrings_.size(); ++i) {
        if (vrings_[i].started) {
            running.push_back(i);
            stop(i);
        }
    }
    if (!dev_.set_mem_table(&m->table)) return Fail::State;
    mem_ = std::move(m);  // the old mapping goes only after the device took the new one
    stats_.mem_tables.add();
    bool ok = true;
    for (const uint16_t i : running) ok = maybe_start(i) && ok;
    return ok ? Fail::None : Fail::Payload;
}

bool BackendSession::inflight_shape_ok(const InflightInfo& i) const noexcept {
    // Rule: a log per data vring at most; a valid ring size (a power of two <= 32768).
    return i.num_queues != 0 && i.num_queues <= vrings_.size() && i.queue_size != 0 &&
           i.queue_size <= virtio::kMaxQueueSize && (i.queue_size & (i.queue_size - 1)) == 0;
}

BackendSession::Fail BackendSession::get_inflight_fd(const InflightInfo& req) noexcept {
    if (!inflight_shape_ok(req)) return Fail::Payload;
    const uint64_t queue_bytes = inflight_queue_bytes(req.queue_size);
    const uint64_t total = queue_bytes * req.num_queues;  // <= 2^16 * 2^19: no overflow
    if (total > kMaxInflightBytes) return Fail::Payload;
    // The running rings write the current log.
    if (any_started()) return Fail::State;
    auto r = mem::MemoryRegion::create(total, "pvnet-inflight");
    if (!r) return Fail::State;
    auto inf = std::make_unique<Inflight>(Inflight{std::move(r.value()), req.num_queues,
                                                   req.queue_size, queue_bytes});
    for (uint16_t q = 0; q < req.num_queues; ++q) {
        (void)ring::init_split_inflight(inf->map.bytes().subspan(q * queue_bytes, queue_bytes),
                                        req.queue_size);
    }
    inflight_reply_ = InflightInfo{total, 0, req.num_queues, req.queue_size};
    inflight_ = std::move(inf);
    stats_.inflight_fds.add();
    return Fail::None;
}

BackendSession::Fail BackendSession::set_inflight_fd(const InflightInfo& info, Fds& fds) noexcept {
    if (!inflight_shape_ok(info)) return Fail::Payload;
    const uint64_t queue_bytes = inflight_queue_bytes(info.queue_size);
    // Rule: room for every queue's log; offset + size does not wrap.
    if (info.mmap_size < queue_bytes * info.num_queues ||
        info.mmap_offset > UINT64_MAX - info.mmap_size) {
        return Fail::Payload;
    }
    if (any_started()) return Fail::State;
    // map_fd refuses a range past the file's end, an unaligned offset and
    // anything but a writable memfd or hugetlbfs file; it takes the fd either way.
    auto r = mem::MemoryRegion::map_fd(fds.take(0), info.mmap_size, info.mmap_offset);
    if (!r) return r.error() == mem::MemError::BadFd ? Fail::FdType : Fail::Payload;
    // Rule: the data path writes the log; a file the front-end could shrink
    // would turn those writes into SIGBUS. GET_INFLIGHT_FD's memfds are sealed.
    if (!r->sealed_against_shrink()) return Fail::Payload;
    inflight_ = std::make_unique<Inflight>(
        Inflight{std::move(r.value()), info.num_queues, info.queue_size, queue_bytes});
    stats_.inflight_fds.add();
    return Fail::None;
}

}  // namespace pvnet::vhost_user
