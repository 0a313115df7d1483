// L2Switch and SwitchPort (see switch_port.h).
#include "pvnet/port/switch_port.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <random>

#include "pvnet/util/clock.h"
#include "pvnet/util/iov.h"

namespace pvnet::port {
namespace {

constexpr uint32_t kMaxEntries = 1u << 20;
/// A full table is swept for stale entries at most this often: a guest
/// spraying new source MACs cannot make every frame scan the table.
constexpr int64_t kSweepIntervalNs = 1'000'000'000;

L2Switch::Mac mac_at(const std::byte* p) noexcept {
    L2Switch::Mac m = 0;
    for (int i = 0; i < 6; ++i) m = (m << 8) | std::to_integer<uint8_t>(p[i]);
    return m;
}

bool is_multicast(L2Switch::Mac m) noexcept { return ((m >> 40) & 1) != 0; }

}  // namespace

std::string_view to_string(SwitchDrop d) noexcept {
    switch (d) {
        case SwitchDrop::Runt:
            return "runt";
        case SwitchDrop::Oversize:
            return "oversize";
        case SwitchDrop::BadSource:
            return "bad_source";
        case SwitchDrop::OwnDevice:
            return "own_device";
        case SwitchDrop::QueueFull:
            return "queue_full";
        case SwitchDrop::MacMove:
            return "mac_move";
        case SwitchDrop::Spoofed:
            return "spoofed_source";
        case SwitchDrop::Storm:
            return "storm";
        case SwitchDrop::PortDown:
            return "port_down";
        case SwitchDrop::Count:
            break;
    }
    return "?";
}

// ---- L2Switch ---------------------------------------------------------------

Result<std::unique_ptr<L2Switch>, PortError> L2Switch::create(SwitchConfig cfg) noexcept {
    if (cfg.max_entries == 0 || cfg.max_entries > kMaxEntries || cfg.ageing.count() <= 0 ||
        cfg.max_dev_macs == 0 ||
        cfg.flood_pps > SwitchConfig::kMaxFloodPps || cfg.flood_burst == 0 ||
        cfg.flood_burst > kMaxEntries) {
        return unexpected(PortError::BadArenaSize);
    }
    try {
        std::vector<Entry> slots(std::bit_ceil(std::size_t{cfg.max_entries} * 2));
        uint64_t seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
        return std::unique_ptr<L2Switch>(new L2Switch(std::move(cfg), std::move(slots), seed | 1));
    } catch (...) {  // bad_alloc, or random_device without a source
        return unexpected(PortError::SystemError);
    }
}

L2Switch::L2Switch(SwitchConfig cfg, std::vector<Entry> slots, uint64_t seed) noexcept
    : cfg_(std::move(cfg)),
      ageing_ns_(cfg_.ageing.count()),
      slots_(std::move(slots)),
      seed_(seed),
      shift_(64 - static_cast<unsigned>(std::countr_zero(slots_.size()))),
      last_sweep_ns_(now_ns()) {}

void L2Switch::attach(uint32_t dev, SwitchPort& p) {
    if (dev >= ports_.size()) {
        ports_.resize(std::size_t{dev} + 1);
        fixed_.resize(std::size_t{dev} + 1, 0);
        const std::lock_guard lock(mu_);
        dev_used_.resize(std::size_t{dev} + 1, 0);
    }
    p.q_index_ = static_cast<uint32_t>(ports_[dev].size());
    ports_[dev].push_back(&p);
}

void L2Switch::fix_mac(uint32_t dev, Mac mac) {
    if (dev >= fixed_.size()) fixed_.resize(std::size_t{dev} + 1, 0);
    fixed_[dev] = mac;
}

int64_t L2Switch::now_ns() const noexcept {
    if (!cfg_.now) return static_cast<int64_t>(clock_ns(CLOCK_MONOTONIC_COARSE));
    return std::chrono::duration_cast<std::chrono::nanoseconds>(cfg_.now()).count();
}

std::size_t L2Switch::home(uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * seed_) >> shift_);
}

L2Switch::Entry* L2Switch::find(uint64_t key) noexcept {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = home(key);; i = (i + 1) & mask) {
        if (slots_[i].key == key) return &slots_[i];
        if (slots_[i].key == 0) return nullptr;
    }
}

// Knuth's algorithm R: move back every later entry of the run that may sit
// at the freed slot, so no probe meets a hole before its key.
void L2Switch::erase(Entry* e) noexcept {
    --dev_used_[e->dev];  // before the shift overwrites *e
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>(e - slots_.data());
    for (std::size_t j = (i + 1) & mask; slots_[j].key != 0; j = (j + 1) & mask) {
        const std::size_t k = home(slots_[j].key);
        // Slot j stays when its home lies cyclically in (i, j].
        const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        slots_[i] = slots_[j];
        i = j;
    }
    slots_[i] = Entry{};
    --used_;
}

uint32_t L2Switch::sweep(int64_t now) noexcept {
    uint32_t n = 0;
    // erase() may shift a not-yet-visited entry into slot i: look at i again.
    for (std::size_t i = 0; i < slots_.size();) {
        if (slots_[i].key != 0 && !fresh(slots_[i], now)) {
            erase(&slots_[i]);
            ++n;
        } else {
            ++i;
        }
    }
    return n;
}

void L2Switch::insert(uint64_t key, uint32_t dev, int64_t now) noexcept {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask;
    slots_[i] = Entry{key, dev, now};
    ++used_;
    ++dev_used_[dev];
}

SwitchDecision L2Switch::forward(uint32_t dev, Mac src, Mac dst, int64_t now) noexcept {
    SwitchDecision d;
    std::lock_guard lock(mu_);
    const uint64_t skey = kUsed | src;
    Entry* e = find(skey);
    if (e != nullptr && e->dev != dev) {
        if (fresh(*e, now)) {
            // Another tenant's live MAC: refused (the frame is dropped), not moved.
            d.move_refused = true;
            return d;
        }
        // Stale on its old device: removed, then learned here as new (its
        // device's limit applies).
        erase(e);
        e = nullptr;
        ++d.aged;
        d.moved = true;
    }
    if (e != nullptr) {
        if (!fresh(*e, now)) {
            ++d.aged;  // expired: learned anew
            d.learned = true;
        }
        e->seen_ns = now;
    } else if (dev_used_[dev] >= cfg_.max_dev_macs) {
        d.dev_limit = true;
    } else {
        if (used_ >= cfg_.max_entries && now - last_sweep_ns_ >= kSweepIntervalNs) {
            last_sweep_ns_ = now;
            d.aged += sweep(now);
        }
        if (used_ >= cfg_.max_entries) {
            d.table_full = true;
        } else {
            insert(skey, dev, now);
            d.learned = true;
        }
    }
    if (!is_multicast(dst)) {  // broadcast is multicast too
        if (Entry* de = find(kUsed | dst)) {
            if (fresh(*de, now)) {
                d.dst_dev = de->dev;
            } else {
                erase(de);
                ++d.aged;
            }
        }
    }
    return d;
}

uint32_t L2Switch::forget(uint32_t dev) noexcept {
    std::lock_guard lock(mu_);
    uint32_t n = 0;
    // As sweep(): erase() may shift a not-yet-visited entry into slot i.
    for (std::size_t i = 0; i < slots_.size() && dev_used_[dev] != 0;) {
        if (slots_[i].key != 0 && slots_[i].dev == dev) {
            erase(&slots_[i]);
            ++n;
        } else {
            ++i;
        }
    }
    return n;
}

uint32_t L2Switch::size() const {
    std::lock_guard lock(mu_);
    return used_;
}

uint32_t L2Switch::size(uint32_t dev) const {
    std::lock_guard lock(mu_);
    return dev_used_[dev];
}

// ---- SwitchPort -------------------------------------------------------------

Result<std::unique_ptr<SwitchPort>, PortError> SwitchPort::create(L2Switch& sw, uint32_t dev,
                                                                  uint32_t max_frame_bytes,
                                                                  uint32_t slots) noexcept {
    if (max_frame_bytes < kEthHdrBytes) return unexpected(PortError::BadFrameSize);
    auto q = ReplyQueue::create(slots, kHdrBytes + max_frame_bytes);
    if (!q) return unexpected(q.error());
    std::unique_ptr<SwitchPort> p(new (std::nothrow)
                                      SwitchPort(sw, dev, std::move(*q), max_frame_bytes));
    if (!p) return unexpected(PortError::SystemError);
    try {
        sw.attach(dev, *p);
    } catch (...) {  // bad_alloc
        return unexpected(PortError::SystemError);
    }
    return p;
}

SwitchPort::SwitchPort(L2Switch& sw, uint32_t dev, std::unique_ptr<ReplyQueue> q,
                       uint32_t max_frame) noexcept
    : sw_(sw), dev_(dev), q_(std::move(q)), max_frame_(max_frame) {
    const SwitchConfig& c = sw.config();
    if (c.flood_pps != 0) {
        flood_interval_ns_ = 1'000'000'000 / int64_t{c.flood_pps};
        flood_tolerance_ns_ = flood_interval_ns_ * (int64_t{c.flood_burst} - 1);
    }
}

void SwitchPort::session_start() noexcept {
    const std::lock_guard lock(producer_mu_);
    up_ = true;
}

void SwitchPort::session_end() noexcept {
    {
        // Down first, under the producers' lock: no copy is queued after the drain.
        const std::lock_guard lock(producer_mu_);
        up_ = false;
    }
    (void)q_->drain();
    forgotten.add(sw_.forget(dev_));
}

bool SwitchPort::up() const noexcept {
    const std::lock_guard lock(producer_mu_);
    return up_;
}

SwitchPort::Enqueued SwitchPort::enqueue(std::span<const iovec> src, uint32_t frame_len) noexcept {
    std::lock_guard lock(producer_mu_);
    if (!up_) return Enqueued::Down;
    std::byte* slot = q_->reserve();
    if (slot == nullptr) return Enqueued::Full;
    // The sender's header is not passed on: no offload was offered.
    std::memset(slot, 0, kHdrBytes);
    (void)copy_from_iov(src, kHdrBytes, std::span<std::byte>(slot + kHdrBytes, frame_len));
    q_->commit(kHdrBytes + frame_len);
    return Enqueued::Queued;
}

void SwitchPort::deliver(SwitchPort& to, std::span<const iovec> src, uint32_t frame_len,
                         bool unicast) noexcept {
    switch (to.enqueue(src, frame_len)) {
        case Enqueued::Queued: forwarded.add(); break;
        case Enqueued::Full: drops.add(SwitchDrop::QueueFull); break;
        // A flood skips a device without a session, as a bridge skips a port
        // that is not forwarding: no copy, nothing lost.
        case Enqueued::Down:
            if (unicast) drops.add(SwitchDrop::PortDown);
            break;
    }
}

bool SwitchPort::flood_allowed(int64_t now) noexcept {
    if (flood_interval_ns_ == 0) return true;
    const int64_t t = std::max(flood_tat_ns_, now);
    if (t - now > flood_tolerance_ns_) return false;
    flood_tat_ns_ = t + flood_interval_ns_;
    return true;
}

SendResult SwitchPort::send(std::span<const iovec> src, uint32_t len) noexcept {
    tx_pkts.add();
    if (len < kHdrBytes + kEthHdrBytes || iov_bytes(src) < len) {
        drops.add(SwitchDrop::Runt);
        return SendResult::Dropped;
    }
    const uint32_t frame_len = len - kHdrBytes;
    if (frame_len > max_frame_) {
        drops.add(SwitchDrop::Oversize);
        return SendResult::Dropped;
    }
    std::byte eth[12];  // destination, source: read once, from a copy
    (void)copy_from_iov(src, kHdrBytes, std::span<std::byte>(eth));
    const L2Switch::Mac dst = mac_at(eth);
    const L2Switch::Mac srcmac = mac_at(eth + 6);
    if (srcmac == 0 || is_multicast(srcmac)) {
        drops.add(SwitchDrop::BadSource);
        return SendResult::Dropped;
    }
    if (const L2Switch::Mac fixed = sw_.fixed_mac(dev_); fixed != 0 && srcmac != fixed) {
        drops.add(SwitchDrop::Spoofed);
        return SendResult::Dropped;
    }
    const int64_t now = sw_.now_ns();
    const SwitchDecision d = sw_.forward(dev_, srcmac, dst, now);
    if (d.learned) learned.add();
    if (d.moved && d.learned) moved.add();
    if (d.table_full) learn_table_full.add();
    if (d.dev_limit) learn_dev_limit.add();
    if (d.aged != 0) aged.add(d.aged);
    if (d.move_refused) {
        drops.add(SwitchDrop::MacMove);
        return SendResult::Dropped;
    }
    if (d.dst_dev == dev_) {
        drops.add(SwitchDrop::OwnDevice);
        return SendResult::Dropped;
    }
    if (d.dst_dev != SwitchDecision::kFlood) {
        tx_unicast.add();
        deliver(sw_.port(d.dst_dev, q_index_), src, frame_len, true);
        return SendResult::Sent;
    }
    if (!flood_allowed(now)) {
        drops.add(SwitchDrop::Storm);
        return SendResult::Dropped;
    }
    tx_flooded.add();
    for (uint32_t other = 0; other < sw_.devices(); ++other) {
        if (other != dev_ && sw_.has_ports(other))
            deliver(sw_.port(other, q_index_), src, frame_len, false);
    }
    return SendResult::Sent;
}

}  // namespace pvnet::port
