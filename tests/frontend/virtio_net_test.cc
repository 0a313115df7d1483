// VirtioNet, the guest driver, against a SplitDeviceQueue playing the device
// on the same guest memory (one MemoryRegion at gpa 0x100000): layout of 1
// and 3 queue pairs, setup rejections, rx refill and its kick decision
// (EVENT_IDX and flags), the NAPI rx poll (bytes, lengths, budget, packet
// defects), transmit and free-on-xmit, the interrupt re-arm, and a hostile
// device breaking the rx ring one rule at a time (STYLE.md §5, §6 "The
// frontend checks used entries the same way"). Decided by counters and
// bytes; every wait is bounded; nothing asserts on time.
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/frontend/virtio_net.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/le.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::frontend {
namespace {

using mem::GuestAddr;
using ring::DescChain;
using ring::PopStatus;
using ring::RingError;
using ring::SplitDeviceQueue;
using Layout = virtio::SplitRingLayout;

constexpr uint64_t kBase = 0x100000;
constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
/// Bounded sleeps: long enough for any scheduler, reached only on a bug.
constexpr int64_t kBoundUs = 5'000'000;

/// Byte `i` of packet `seq` (after the zeroed header).
std::byte pattern(uint64_t seq, std::size_t i) {
    return static_cast<std::byte>((seq * 31u + i * 7u + 1u) & 0xffu);
}
void write_packet(std::byte* p, uint64_t seq, uint32_t len) {
    for (uint32_t i = 0; i < len; ++i) p[i] = i < kHdr ? std::byte{0} : pattern(seq, i);
}
bool packet_ok(const std::byte* p, uint64_t seq, uint32_t len) {
    for (uint32_t i = 0; i < len; ++i) {
        if (p[i] != (i < kHdr ? std::byte{0} : pattern(seq, i))) return false;
    }
    return true;
}

notify::EventFd must_fd() {
    auto r = notify::EventFd::create();
    if (!r) throw std::runtime_error("EventFd::create");
    return std::move(r.value());
}

struct Doorbells {
    notify::EventFd rx_kick = must_fd();
    notify::EventFd tx_kick = must_fd();
    notify::EventFd rx_call = must_fd();
    notify::EventFd tx_call = must_fd();
};

/// The device's side of one queue pair: both rings, mapped on the same table.
struct Device {
    std::unique_ptr<SplitDeviceQueue> rx, tx;
    std::unique_ptr<DescChain> chain = std::make_unique<DescChain>();
};

/// An rx chain the device popped.
struct Popped {
    uint16_t head = 0;
    std::byte* host = nullptr;
    uint32_t room = 0;
};

/// A gpa interval [begin, end).
struct Span {
    uint64_t begin = 0, end = 0;
};

/// Guest memory, doorbells, the driver under test and a device per pair.
class Env {
public:
    explicit Env(const VirtioNetConfig& cfg, uint64_t mem_bytes = 0) : cfg_(cfg) {
        area_ = VirtioNet::area_bytes(cfg);
        auto r = mem::MemoryRegion::create(mem_bytes != 0 ? mem_bytes : area_, "virtio_net_test");
        if (!r) throw std::runtime_error("MemoryRegion::create");
        region_.emplace(std::move(r.value()));
        if (!table_.add(GuestAddr(kBase), region_->bytes())) throw std::runtime_error("table");
        for (uint16_t i = 0; i < cfg.queue_pairs; ++i) {
            bells_.push_back(std::make_unique<Doorbells>());
            const Doorbells& b = *bells_.back();
            fds_.push_back(VirtioNetFds{&b.rx_kick, &b.tx_kick, &b.rx_call, &b.tx_call});
        }
    }

    Result<std::unique_ptr<VirtioNet>, FrontendError> create(uint64_t bytes,
                                                             GuestAddr base = GuestAddr(kBase)) {
        return VirtioNet::create(table_, base, bytes, cfg_, fds_);
    }
    Result<std::unique_ptr<VirtioNet>, FrontendError> create_with_fds(
        std::span<const VirtioNetFds> fds) {
        return VirtioNet::create(table_, GuestAddr(kBase), area_, cfg_, fds);
    }

    /// Creates the driver over the whole area, then a device on each pair's rings.
    void start() {
        auto n = create(area_);
        if (!n) throw std::runtime_error("VirtioNet::create");
        net_ = std::move(*n);
        for (uint16_t i = 0; i < net_->queue_pairs(); ++i) {
            const QueuePair& qp = net_->queue_pair(i);
            ring::DeviceQueueConfig c;
            c.features = cfg_.event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0;
            c.addrs = qp.rx_addrs();
            auto rx = SplitDeviceQueue::create(table_, c);
            c.addrs = qp.tx_addrs();
            auto tx = SplitDeviceQueue::create(table_, c);
            if (!rx || !tx) throw std::runtime_error("SplitDeviceQueue::create");
            Device d;
            d.rx = std::move(*rx);
            d.tx = std::move(*tx);
            devs_.push_back(std::move(d));
        }
    }

    QueuePair& qp(uint16_t i = 0) { return net_->queue_pair(i); }
    Device& dev(uint16_t i = 0) { return devs_[i]; }
    const Doorbells& bells(uint16_t i = 0) const { return *bells_[i]; }
    std::span<const VirtioNetFds> fds() const { return fds_; }
    uint64_t area() const { return area_; }
    const VirtioNetConfig& cfg() const { return cfg_; }

    uint64_t gpa_of(const std::byte* host) const {
        return kBase + static_cast<uint64_t>(host - region_->host());
    }
    std::byte* host(uint64_t gpa) const { return region_->host() + (gpa - kBase); }

    // ---- the device -----------------------------------------------------------

    /// Pops up to `n` rx chains (each must be one writable piece).
    std::vector<Popped> pop_rx(uint16_t i, std::size_t n) {
        std::vector<Popped> out;
        DescChain& c = *devs_[i].chain;
        while (out.size() < n && devs_[i].rx->pop(c) == PopStatus::Ok) {
            EXPECT_EQ(c.out_num, 0u);
            EXPECT_EQ(c.in_num, 1u);
            out.push_back(Popped{c.head, static_cast<std::byte*>(c.iov[0].iov_base), c.in_bytes});
        }
        return out;
    }
    /// Writes packet `seq` of `len` bytes into a popped chain and stages it.
    void fill_rx(uint16_t i, const Popped& p, uint64_t seq, uint32_t len) {
        write_packet(p.host, seq, std::min(len, p.room));
        if (!devs_[i].rx->add_used(p.head, len)) throw std::logic_error("add_used");
    }
    /// Pops and returns every tx chain with length 0.
    uint32_t complete_tx(uint16_t i) {
        DescChain& c = *devs_[i].chain;
        uint32_t n = 0;
        while (devs_[i].tx->pop(c) == PopStatus::Ok) {
            if (!devs_[i].tx->add_used(c.head, 0)) throw std::logic_error("add_used");
            ++n;
        }
        devs_[i].tx->flush_used();
        return n;
    }

    // ---- raw ring fields (what an honest device cannot do) --------------------

    /// Writes used element `slot` and then used.idx of pair i's rx ring.
    void raw_rx_used(uint16_t i, uint16_t used_idx, uint32_t id, uint32_t len) {
        const ring::SplitRingAddrs& a = qp(i).rx_addrs();
        virtio::virtq_used_elem e{};
        e.id.set(id);
        e.len.set(len);
        const uint16_t slot = static_cast<uint16_t>((used_idx - 1u) & (a.size - 1u));
        std::memcpy(host(a.used.value) + Layout::used_ring_off(slot), &e, sizeof e);
        virtio::Le16 idx{};
        idx.set(used_idx);
        std::memcpy(host(a.used.value) + Layout::used_idx_off(), &idx, sizeof idx);
    }
    uint16_t rx_used_idx(uint16_t i) {
        virtio::Le16 idx{};
        std::memcpy(&idx, host(qp(i).rx_addrs().used.value) + Layout::used_idx_off(), sizeof idx);
        return idx.get();
    }
    virtio::virtq_desc tx_desc(uint16_t i, uint16_t head) {
        virtio::virtq_desc d{};
        std::memcpy(&d, host(qp(i).tx_addrs().desc.value) + 16u * head, sizeof d);
        return d;
    }

private:
    VirtioNetConfig cfg_;
    uint64_t area_ = 0;
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::vector<std::unique_ptr<Doorbells>> bells_;
    std::vector<VirtioNetFds> fds_;
    std::unique_ptr<VirtioNet> net_;
    std::vector<Device> devs_;
};

VirtioNetConfig config(uint16_t pairs, uint16_t rx_size = 256, uint16_t tx_size = 256,
                       bool event_idx = true) {
    VirtioNetConfig c;
    c.queue_pairs = pairs;
    c.rx_size = rx_size;
    c.tx_size = tx_size;
    c.event_idx = event_idx;
    return c;
}

/// A deliver callback that records what it saw and frees (returns false).
struct Recorder {
    struct Seen {
        uint32_t id;
        const std::byte* frame;
        uint32_t len;
    };
    std::vector<Seen> seen;
    bool keep = false;
    bool operator()(uint32_t id, const std::byte* frame, uint32_t len) {
        seen.push_back(Seen{id, frame, len});
        return keep;
    }
};

/// Every gpa interval a queue pair occupies: rx ring, tx ring, buffers.
std::vector<Span> occupied(const Env& env, const QueuePair& qp) {
    std::vector<Span> out;
    for (const ring::SplitRingAddrs* a : {&qp.rx_addrs(), &qp.tx_addrs()}) {
        const uint64_t begin = a->desc.value;
        const uint64_t end = begin + ring::split_ring_bytes(a->size);
        // The three parts sit inside the ring's own span, in order.
        EXPECT_EQ(begin % 16, 0u);
        EXPECT_GE(a->avail.value, begin + Layout::desc_bytes(a->size));
        EXPECT_GE(a->used.value, a->avail.value + Layout::avail_bytes(a->size));
        EXPECT_EQ(a->used.value % 4, 0u);
        EXPECT_LE(a->used.value + Layout::used_bytes(a->size), end);
        out.push_back(Span{begin, end});
    }
    const uint64_t bufs = env.gpa_of(qp.buf_host(0));
    for (uint32_t id = 1; id < qp.total_bufs(); ++id) {
        EXPECT_EQ(env.gpa_of(qp.buf_host(id)), bufs + uint64_t{id} * qp.buf_bytes());
    }
    out.push_back(Span{bufs, bufs + uint64_t{qp.total_bufs()} * qp.buf_bytes()});
    return out;
}

void expect_layout(uint16_t pairs) {
    Env env(config(pairs));
    env.start();
    EXPECT_EQ(env.qp().total_bufs(), 2u * (256u + 256u));
    std::vector<Span> all;
    for (uint16_t i = 0; i < pairs; ++i) {
        const QueuePair& qp = env.qp(i);
        EXPECT_EQ(qp.free_bufs(), qp.total_bufs());
        EXPECT_EQ(qp.rx_addrs().size, 256u);
        EXPECT_EQ(qp.tx_addrs().size, 256u);
        for (const Span& s : occupied(env, qp)) all.push_back(s);
    }
    ASSERT_EQ(all.size(), 3u * pairs);
    for (const Span& s : all) {
        EXPECT_LT(s.begin, s.end);
        EXPECT_GE(s.begin, kBase);
        EXPECT_LE(s.end, kBase + env.area());
    }
    std::sort(all.begin(), all.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (std::size_t k = 1; k < all.size(); ++k) {
        EXPECT_LE(all[k - 1].end, all[k].begin) << "overlap at interval " << k;
    }
}

// ---- create ------------------------------------------------------------------

TEST(VirtioNetCreate, OnePairLiesInsideTheArea) { expect_layout(1); }

TEST(VirtioNetCreate, ThreePairsDoNotOverlapAndLieInsideTheArea) { expect_layout(3); }

TEST(VirtioNetCreate, AreaIsPairsTimesPairArea) {
    const VirtioNetConfig c1 = config(1), c3 = config(3);
    EXPECT_EQ(VirtioNet::area_bytes(c3), 3u * QueuePair::area_bytes(c1));
    EXPECT_EQ(QueuePair::area_bytes(c1) % 4096, 0u);
}

TEST(VirtioNetCreate, HonoursExplicitBufferCount) {
    VirtioNetConfig c = config(2, 64, 64);
    c.n_bufs = 100;
    c.buf_bytes = 1024;
    Env env(c);
    env.start();
    for (uint16_t i = 0; i < 2; ++i) {
        EXPECT_EQ(env.qp(i).total_bufs(), 100u);
        EXPECT_EQ(env.qp(i).free_bufs(), 100u);
        EXPECT_EQ(env.qp(i).buf_bytes(), 1024u);
    }
}

TEST(VirtioNetCreate, RejectsTooSmallArea) {
    for (uint16_t pairs : {uint16_t{1}, uint16_t{3}}) {
        Env env(config(pairs));
        auto r = env.create(env.area() - 1);
        ASSERT_FALSE(r.has_value()) << pairs;
        EXPECT_EQ(r.error(), FrontendError::AreaTooSmall);
        auto half = env.create(env.area() / 2);
        EXPECT_FALSE(half.has_value());
        auto ok = env.create(env.area());
        EXPECT_TRUE(ok.has_value()) << pairs;
    }
}

TEST(VirtioNetCreate, RejectsFdsCountMismatch) {
    Env env(config(3));
    auto two = env.create_with_fds(env.fds().first(2));
    ASSERT_FALSE(two.has_value());
    EXPECT_EQ(two.error(), FrontendError::AreaTooSmall);
    auto none = env.create_with_fds({});
    EXPECT_FALSE(none.has_value());
    EXPECT_TRUE(env.create_with_fds(env.fds()).has_value());

    Env one(config(1));
    std::vector<VirtioNetFds> extra(one.fds().begin(), one.fds().end());
    extra.push_back(extra[0]);
    EXPECT_FALSE(one.create_with_fds(extra).has_value());
}

TEST(VirtioNetCreate, RejectsZeroQueuePairs) {
    VirtioNetConfig c = config(0);
    mem::MemoryTable table;
    EXPECT_FALSE(VirtioNet::create(table, GuestAddr(kBase), 1u << 30, c, {}).has_value());
}

TEST(VirtioNetCreate, RejectsAreaBeyondMappedMemory) {
    // Memory holds exactly the area; starting one page in, the buffers of the
    // last pair hang over the end of the region.
    Env env(config(3));
    auto r = env.create(env.area(), GuestAddr(kBase + 4096));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), FrontendError::AreaUnmapped);
    auto away = env.create(env.area(), GuestAddr(kBase + (1u << 30)));
    EXPECT_FALSE(away.has_value());
}

TEST(VirtioNetCreate, RejectsMisalignedBase) {
    Env env(config(1), 2 * QueuePair::area_bytes(config(1)));
    EXPECT_FALSE(env.create(env.area(), GuestAddr(kBase + 16)).has_value());
    EXPECT_TRUE(env.create(env.area(), GuestAddr(kBase + 4096)).has_value());
}

TEST(VirtioNetCreate, RejectsRingSizeNotPowerOfTwo) {
    Env env(config(1, 100, 256));
    auto r = env.create(env.area());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), FrontendError::RingSetup);
}

// ---- try_fill_recv --------------------------------------------------------------

class TryFillRecv : public ::testing::TestWithParam<bool> {};

TEST_P(TryFillRecv, PostsEveryBufferUpToRingSizeAndKicksOnce) {
    Env env(config(1, 128, 128, GetParam()));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    EXPECT_EQ(qp.try_fill_recv(), 128u);
    EXPECT_EQ(qp.rx_queue().num_free(), 0u);
    EXPECT_EQ(qp.free_bufs(), total - 128u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 1u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 1u);
    // Full ring: nothing to add, no kick.
    EXPECT_EQ(qp.try_fill_recv(), 0u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 0u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 1u);
    EXPECT_EQ(env.bells().tx_kick.consume(), 0u);

    // The device sees exactly the pool's buffers, each whole and writable.
    const std::vector<Popped> got = env.pop_rx(0, 1000);
    ASSERT_EQ(got.size(), 128u);
    std::set<const std::byte*> hosts;
    std::set<const std::byte*> pool;
    for (uint32_t id = 0; id < total; ++id) pool.insert(qp.buf_host(id));
    for (const Popped& p : got) {
        EXPECT_EQ(p.room, qp.buf_bytes());
        EXPECT_TRUE(pool.count(p.host)) << "not a pool buffer";
        hosts.insert(p.host);
    }
    EXPECT_EQ(hosts.size(), 128u) << "a buffer posted twice";
}

TEST_P(TryFillRecv, KicksOnlyWhenTheDeviceAsks) {
    const bool event_idx = GetParam();
    Env env(config(1, 64, 64, event_idx));
    env.start();
    QueuePair& qp = env.qp();
    Device& dev = env.dev();
    ASSERT_EQ(qp.try_fill_recv(), 64u);
    ASSERT_EQ(env.bells().rx_kick.consume(), 1u);

    auto cycle = [&] {
        const std::vector<Popped> got = env.pop_rx(0, 64);
        ASSERT_EQ(got.size(), 64u);
        for (const Popped& p : got) env.fill_rx(0, p, 0, 64);
        dev.rx->flush_used();
        Recorder rec;
        ASSERT_EQ(qp.poll_rx(64, rec), 64u);
    };

    // The device is polling (no kicks wanted): with EVENT_IDX avail_event
    // stays at 0, behind the new buffers; without, NO_NOTIFY is set.
    dev.rx->disable_notify();
    cycle();
    EXPECT_EQ(qp.try_fill_recv(), 64u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 0u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 1u);
    EXPECT_EQ(qp.rx_queue().stats().kicks_suppressed.get(), 1u);

    // The device goes to sleep: re-armed at its position, so the refill kicks.
    cycle();
    EXPECT_FALSE(dev.rx->enable_notify()) << "nothing new was posted yet";
    EXPECT_EQ(qp.try_fill_recv(), 64u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 1u);
    EXPECT_EQ(qp.stats().rx_kicks.get(), 2u);
}

TEST_P(TryFillRecv, StopsAndCountsWhenThePoolRunsDry) {
    VirtioNetConfig c = config(1, 64, 64, GetParam());
    c.n_bufs = 40;
    Env env(c);
    env.start();
    QueuePair& qp = env.qp();
    EXPECT_EQ(qp.try_fill_recv(), 40u);
    EXPECT_EQ(qp.free_bufs(), 0u);
    EXPECT_EQ(qp.stats().refill_empty_pool.get(), 1u);
    EXPECT_EQ(qp.rx_queue().num_free(), 24u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 1u);
    uint32_t id = 0;
    EXPECT_FALSE(qp.alloc_buf(id));
}

INSTANTIATE_TEST_SUITE_P(EventIdx, TryFillRecv, ::testing::Bool());

// ---- poll_rx ------------------------------------------------------------------------

TEST(PollRx, DeliversExactlyTheDevicesBytesWithinTheBudget) {
    Env env(config(1, 128, 128));
    env.start();
    QueuePair& qp = env.qp();
    ASSERT_EQ(qp.try_fill_recv(), 128u);
    const uint32_t free_after_fill = qp.free_bufs();

    const std::vector<Popped> got = env.pop_rx(0, 100);
    ASSERT_EQ(got.size(), 100u);
    std::vector<uint32_t> lens;
    uint64_t total_bytes = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
        const uint32_t len = kHdr + 1 + static_cast<uint32_t>((k * 397u) % 2035u);
        ASSERT_LE(len, qp.buf_bytes());
        lens.push_back(len);
        total_bytes += len;
        env.fill_rx(0, got[k], k, len);
    }
    env.dev().rx->flush_used();

    Recorder rec;
    EXPECT_EQ(qp.poll_rx(kNapiBudget, rec), 64u);
    EXPECT_EQ(rec.seen.size(), 64u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(qp.poll_rx(kNapiBudget, rec), 36u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(qp.poll_rx(kNapiBudget, rec), 0u);
    EXPECT_EQ(qp.stats().napi_polls.get(), 3u);

    ASSERT_EQ(rec.seen.size(), 100u);
    std::set<uint32_t> ids;
    for (std::size_t k = 0; k < rec.seen.size(); ++k) {
        const Recorder::Seen& s = rec.seen[k];
        EXPECT_EQ(s.len, lens[k]) << k;
        EXPECT_EQ(s.frame, got[k].host) << "buffer id maps to the chain's memory, " << k;
        EXPECT_EQ(s.frame, qp.buf_host(s.id)) << k;
        EXPECT_TRUE(packet_ok(s.frame, k, s.len)) << k;
        ids.insert(s.id);
    }
    EXPECT_EQ(ids.size(), 100u);
    EXPECT_EQ(qp.stats().rx_pkts.get(), 100u);
    EXPECT_EQ(qp.stats().rx_bytes.get(), total_bytes);
    EXPECT_EQ(qp.stats().rx_drop_bad_len.get(), 0u);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 100u) << "deliver said no: buffers freed";
    EXPECT_EQ(qp.rx_queue().num_free(), 100u);
}

TEST(PollRx, ExactlyBudgetPendingCountsExhausted) {
    Env env(config(1, 128, 128));
    env.start();
    QueuePair& qp = env.qp();
    qp.try_fill_recv();
    for (const Popped& p : env.pop_rx(0, 64)) env.fill_rx(0, p, 0, 60);
    env.dev().rx->flush_used();
    Recorder rec;
    EXPECT_EQ(qp.poll_rx(64, rec), 64u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
    EXPECT_EQ(qp.poll_rx(64, rec), 0u);
    EXPECT_EQ(qp.stats().napi_budget_exhausted.get(), 1u);
}

TEST(PollRx, KeptBuffersStayOutOfThePoolUntilFreed) {
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    qp.try_fill_recv();
    const uint32_t free_after_fill = qp.free_bufs();
    const std::vector<Popped> got = env.pop_rx(0, 10);
    for (std::size_t k = 0; k < got.size(); ++k) env.fill_rx(0, got[k], k, 100);
    env.dev().rx->flush_used();
    std::vector<uint32_t> kept;
    uint32_t calls = 0;
    auto deliver = [&](uint32_t id, const std::byte*, uint32_t) {
        const bool keep = (calls++ % 2) == 0;
        if (keep) kept.push_back(id);
        return keep;
    };
    EXPECT_EQ(qp.poll_rx(64, deliver), 10u);
    EXPECT_EQ(kept.size(), 5u);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 5u);
    for (uint32_t id : kept) qp.free_buf(id);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 10u);
}

TEST(PollRx, UsedLenUpToHeaderSizeIsDroppedAndCounted) {
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    qp.try_fill_recv();
    const uint32_t free_after_fill = qp.free_bufs();
    const std::vector<Popped> got = env.pop_rx(0, 4);
    ASSERT_EQ(got.size(), 4u);
    const uint32_t lens[] = {0, 1, kHdr, kHdr + 1};
    for (std::size_t k = 0; k < 4; ++k) env.fill_rx(0, got[k], k, lens[k]);
    env.dev().rx->flush_used();
    Recorder rec;
    EXPECT_EQ(qp.poll_rx(64, rec), 4u);
    ASSERT_EQ(rec.seen.size(), 1u);
    EXPECT_EQ(rec.seen[0].len, kHdr + 1);
    EXPECT_EQ(rec.seen[0].frame, got[3].host);
    EXPECT_EQ(qp.stats().rx_drop_bad_len.get(), 3u);
    EXPECT_EQ(qp.free_bufs(), free_after_fill + 4u) << "dropped buffers go back to the pool";
    EXPECT_FALSE(qp.rx_queue().broken()) << "a packet defect, not a ring violation";
}

TEST(PollRx, RefillAndPollAcrossIndexWrapAround) {
    // 1030 rounds of 64: avail.idx and used.idx wrap past 65535.
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    constexpr uint32_t kRounds = 1030;
    for (uint32_t round = 0; round < kRounds; ++round) {
        qp.try_fill_recv();
        const std::vector<Popped> got = env.pop_rx(0, 64);
        ASSERT_EQ(got.size(), 64u);
        for (std::size_t k = 0; k < got.size(); ++k) env.fill_rx(0, got[k], k + round, 200);
        env.dev().rx->flush_used();
        Recorder rec;
        ASSERT_EQ(qp.poll_rx(64, rec), 64u);
        for (std::size_t k = 0; k < rec.seen.size(); ++k) {
            ASSERT_EQ(rec.seen[k].len, 200u);
            ASSERT_TRUE(packet_ok(rec.seen[k].frame, k + round, 200)) << round;
        }
        ASSERT_EQ(qp.free_bufs(), total);
    }
    EXPECT_EQ(qp.stats().rx_pkts.get(), uint64_t{kRounds} * 64u);
    EXPECT_FALSE(qp.rx_queue().broken());
}

// ---- a hostile device on the rx ring -----------------------------------------------

class HostileRxDevice : public ::testing::Test {
protected:
    void SetUp() override {
        env_.start();
        ASSERT_EQ(env_.qp().try_fill_recv(), 64u);
    }
    /// After the device broke the ring: the guest stops touching it.
    void expect_broken(RingError why) {
        QueuePair& qp = env_.qp();
        Recorder rec;
        EXPECT_EQ(qp.poll_rx(64, rec), 0u);
        EXPECT_TRUE(rec.seen.empty());
        EXPECT_TRUE(qp.rx_queue().broken());
        EXPECT_EQ(qp.rx_queue().broken_reason(), why);
        EXPECT_EQ(qp.rx_queue().stats().errors.get(why), 1u);
        // And stays stopped, even when the device then behaves.
        const std::vector<Popped> got = env_.pop_rx(0, 1);
        if (!got.empty()) {
            env_.fill_rx(0, got[0], 0, 100);
            env_.dev().rx->flush_used();
        }
        EXPECT_EQ(qp.poll_rx(64, rec), 0u);
        EXPECT_TRUE(rec.seen.empty());
        EXPECT_EQ(qp.try_fill_recv(), 0u);
        EXPECT_TRUE(qp.napi_complete()) << "broken: sleep rather than spin";
    }
    Env env_{config(1, 64, 64)};
};

TEST_F(HostileRxDevice, UsedIdOutOfRangeBreaksTheQueue) {
    env_.raw_rx_used(0, 1, 64 + 5, 100);
    expect_broken(RingError::UsedIdOutOfRange);
}

TEST_F(HostileRxDevice, HugeUsedIdBreaksTheQueue) {
    env_.raw_rx_used(0, 1, 0xffffffffu, 100);
    expect_broken(RingError::UsedIdOutOfRange);
}

TEST_F(HostileRxDevice, UsedIdNotInFlightBreaksTheQueue) {
    // One honest round trip, then the device returns the same head again.
    const std::vector<Popped> got = env_.pop_rx(0, 1);
    ASSERT_EQ(got.size(), 1u);
    env_.fill_rx(0, got[0], 0, 100);
    env_.dev().rx->flush_used();
    Recorder rec;
    ASSERT_EQ(env_.qp().poll_rx(64, rec), 1u);
    env_.raw_rx_used(0, 2, got[0].head, 100);
    expect_broken(RingError::UsedIdNotInflight);
}

TEST_F(HostileRxDevice, UsedLenAboveThePostedBufferBreaksTheQueue) {
    const std::vector<Popped> got = env_.pop_rx(0, 1);
    ASSERT_EQ(got.size(), 1u);
    env_.raw_rx_used(0, 1, got[0].head, env_.qp().buf_bytes() + 1);
    expect_broken(RingError::UsedLenTooLong);
}

TEST_F(HostileRxDevice, UsedIdxPastWhatIsInFlightBreaksTheQueue) {
    env_.raw_rx_used(0, 65, 0, 100);
    expect_broken(RingError::UsedIdxJump);
}

// ---- xmit / tx_flush / free_old_xmit ----------------------------------------------------

TEST(Xmit, DevicePopsAReadableChainAtTheBuffersGpa) {
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    write_packet(qp.buf_host(id), 7, 100);
    ASSERT_TRUE(qp.xmit(id, 100));
    EXPECT_EQ(env.bells().tx_kick.consume(), 0u) << "not published before tx_flush";
    qp.tx_flush();
    EXPECT_EQ(env.bells().tx_kick.consume(), 1u);
    EXPECT_EQ(qp.stats().tx_kicks.get(), 1u);
    EXPECT_EQ(env.bells().rx_kick.consume(), 0u);

    DescChain& c = *env.dev().chain;
    ASSERT_EQ(env.dev().tx->pop(c), PopStatus::Ok);
    EXPECT_EQ(c.out_num, 1u);
    EXPECT_EQ(c.in_num, 0u);
    EXPECT_EQ(c.out_bytes, 100u);
    EXPECT_EQ(c.readable()[0].iov_base, qp.buf_host(id));
    EXPECT_EQ(c.readable()[0].iov_len, 100u);
    EXPECT_TRUE(packet_ok(static_cast<const std::byte*>(c.readable()[0].iov_base), 7, 100));
    const virtio::virtq_desc d = env.tx_desc(0, c.head);
    EXPECT_EQ(d.addr.get(), env.gpa_of(qp.buf_host(id)));
    EXPECT_EQ(d.len.get(), 100u);
    EXPECT_EQ(d.flags.get(), 0u) << "device-readable, single descriptor";
    EXPECT_EQ(env.dev().tx->pop(c), PopStatus::Empty);
    EXPECT_EQ(qp.stats().tx_pkts.get(), 1u);
    EXPECT_EQ(qp.stats().tx_bytes.get(), 100u);
}

TEST(Xmit, FullRingRefusesCountsAndFreesTheBuffer) {
    Env env(config(1, 64, 8));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    for (uint32_t k = 0; k < 8; ++k) {
        uint32_t id = 0;
        ASSERT_TRUE(qp.alloc_buf(id));
        ASSERT_TRUE(qp.xmit(id, 60)) << k;
    }
    EXPECT_EQ(qp.tx_queue().num_free(), 0u);
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    EXPECT_EQ(qp.free_bufs(), total - 9u);
    EXPECT_FALSE(qp.xmit(id, 60));
    EXPECT_EQ(qp.stats().tx_drop_ring_full.get(), 1u);
    EXPECT_EQ(qp.free_bufs(), total - 8u) << "the refused buffer is back in the pool";
    EXPECT_EQ(qp.stats().tx_pkts.get(), 8u);
    qp.tx_flush();
    EXPECT_EQ(env.bells().tx_kick.consume(), 1u);
    EXPECT_EQ(env.complete_tx(0), 8u);
}

TEST(Xmit, FreeOldXmitReturnsBuffersOnceTheDeviceIsDone) {
    Env env(config(1, 64, 8));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    for (int round = 0; round < 3; ++round) {
        for (uint32_t k = 0; k < 8; ++k) {
            uint32_t id = 0;
            ASSERT_TRUE(qp.alloc_buf(id));
            ASSERT_TRUE(qp.xmit(id, 60));
        }
        qp.tx_flush();
        EXPECT_EQ(qp.free_old_xmit(), 0u) << "nothing completed yet";
        EXPECT_EQ(qp.free_bufs(), total - 8u);
        EXPECT_EQ(env.complete_tx(0), 8u);
        EXPECT_EQ(qp.free_old_xmit(), 8u);
        EXPECT_EQ(qp.free_bufs(), total);
        EXPECT_EQ(qp.tx_queue().num_free(), 8u);
        EXPECT_EQ(qp.free_old_xmit(), 0u);
    }
    EXPECT_EQ(qp.stats().tx_drop_ring_full.get(), 0u);
}

TEST(Xmit, ReceivedBufferForwardedAsIs) {
    // The guest's io forwarding: an rx buffer kept by deliver goes out on tx
    // and comes back to the pool through free_old_xmit.
    Env env(config(1, 64, 64));
    env.start();
    QueuePair& qp = env.qp();
    const uint32_t total = qp.total_bufs();
    qp.try_fill_recv();
    const std::vector<Popped> got = env.pop_rx(0, 5);
    for (std::size_t k = 0; k < got.size(); ++k) env.fill_rx(0, got[k], k, 150);
    env.dev().rx->flush_used();
    auto forward = [&](uint32_t id, const std::byte*, uint32_t len) { return qp.xmit(id, len); };
    EXPECT_EQ(qp.poll_rx(64, forward), 5u);
    qp.tx_flush();
    DescChain& c = *env.dev().chain;
    for (std::size_t k = 0; k < 5; ++k) {
        ASSERT_EQ(env.dev().tx->pop(c), PopStatus::Ok);
        EXPECT_EQ(c.readable()[0].iov_base, got[k].host);
        EXPECT_EQ(c.out_bytes, 150u);
        EXPECT_TRUE(packet_ok(got[k].host, k, 150));
        ASSERT_TRUE(env.dev().tx->add_used(c.head, 0));
    }
    env.dev().tx->flush_used();
    EXPECT_EQ(qp.free_old_xmit(), 5u);
    EXPECT_EQ(qp.free_bufs(), total - 59u) << "5 of 64 posted rx buffers went out on tx and back";
}

TEST(Xmit, HostileTxCompletionBreaksTxOnly) {
    // A tx used entry claiming written bytes: the device wrote into a
    // device-readable buffer.
    Env env(config(1, 64, 8));
    env.start();
    QueuePair& qp = env.qp();
    uint32_t id = 0;
    ASSERT_TRUE(qp.alloc_buf(id));
    ASSERT_TRUE(qp.xmit(id, 60));
    qp.tx_flush();
    DescChain& c = *env.dev().chain;
    ASSERT_EQ(env.dev().tx->pop(c), PopStatus::Ok);
    const ring::SplitRingAddrs& a = qp.tx_addrs();
    virtio::virtq_used_elem e{};
    e.id.set(c.head);
    e.len.set(60);
    std::memcpy(env.host(a.used.value) + Layout::used_ring_off(0), &e, sizeof e);
    virtio::Le16 idx{};
    idx.set(1);
    std::memcpy(env.host(a.used.value) + Layout::used_idx_off(), &idx, sizeof idx);
    EXPECT_EQ(qp.free_old_xmit(), 0u);
    EXPECT_TRUE(qp.tx_queue().broken());
    EXPECT_EQ(qp.tx_queue().broken_reason(), RingError::UsedLenTooLong);
    uint32_t id2 = 0;
    ASSERT_TRUE(qp.alloc_buf(id2));
    EXPECT_FALSE(qp.xmit(id2, 60));
    EXPECT_FALSE(qp.rx_queue().broken());
    EXPECT_EQ(qp.try_fill_recv(), 64u);
}

// ---- napi_complete / wait_rx ----------------------------------------------------------

class NapiComplete : public ::testing::TestWithParam<bool> {};

TEST_P(NapiComplete, FalseWhileUsedEntriesArePendingTrueOtherwise) {
    Env env(config(1, 64, 64, GetParam()));
    env.start();
    QueuePair& qp = env.qp();
    Device& dev = env.dev();
    qp.try_fill_recv();
    EXPECT_TRUE(qp.napi_complete()) << "nothing used yet";

    std::vector<Popped> got = env.pop_rx(0, 64);
    ASSERT_EQ(got.size(), 64u);
    for (std::size_t k = 0; k < 5; ++k) env.fill_rx(0, got[k], k, 80);
    dev.rx->flush_used();
    EXPECT_TRUE(dev.rx->should_signal());
    EXPECT_FALSE(qp.napi_complete()) << "5 used entries pending";
    EXPECT_FALSE(qp.napi_complete()) << "still pending";

    Recorder rec;
    EXPECT_EQ(qp.poll_rx(64, rec), 5u);
    // Polling: the device must not interrupt.
    env.fill_rx(0, got[5], 5, 80);
    dev.rx->flush_used();
    EXPECT_FALSE(dev.rx->should_signal());
    // Arrived between the poll and the re-arm: poll again instead of sleeping.
    EXPECT_FALSE(qp.napi_complete());
    EXPECT_EQ(qp.poll_rx(64, rec), 1u);
    EXPECT_TRUE(qp.napi_complete());
    EXPECT_TRUE(qp.napi_complete());

    // Re-armed: the next used entry interrupts.
    env.fill_rx(0, got[6], 6, 80);
    dev.rx->flush_used();
    EXPECT_TRUE(dev.rx->should_signal());
    EXPECT_FALSE(qp.napi_complete());
}

TEST_P(NapiComplete, WaitRxWakesOnTheCallFdAndTimesOutWithout) {
    Env env(config(1, 64, 64, GetParam()));
    env.start();
    QueuePair& qp = env.qp();
    qp.wait_rx(1000);
    EXPECT_EQ(qp.stats().wait_timeouts.get(), 1u);
    EXPECT_EQ(qp.stats().rx_interrupts.get(), 0u);
    env.bells().rx_call.signal();
    env.bells().rx_call.signal();
    qp.wait_rx(kBoundUs);
    EXPECT_EQ(qp.stats().rx_interrupts.get(), 1u);
    EXPECT_EQ(env.bells().rx_call.consume(), 0u) << "wait_rx consumed the merged count";
    EXPECT_EQ(env.bells().tx_call.consume(), 0u);
}

INSTANTIATE_TEST_SUITE_P(EventIdx, NapiComplete, ::testing::Bool());

// ---- several queue pairs ---------------------------------------------------------------

TEST(QueuePairs, EachPairUsesItsOwnRingsAndDoorbells) {
    Env env(config(3, 64, 64));
    env.start();
    ASSERT_EQ(env.qp(1).try_fill_recv(), 64u);
    EXPECT_EQ(env.bells(0).rx_kick.consume(), 0u);
    EXPECT_EQ(env.bells(1).rx_kick.consume(), 1u);
    EXPECT_EQ(env.bells(2).rx_kick.consume(), 0u);
    EXPECT_TRUE(env.pop_rx(0, 64).empty());
    EXPECT_TRUE(env.pop_rx(2, 64).empty());

    ASSERT_EQ(env.qp(0).try_fill_recv(), 64u);
    ASSERT_EQ(env.qp(2).try_fill_recv(), 64u);
    const std::vector<Popped> got = env.pop_rx(2, 3);
    ASSERT_EQ(got.size(), 3u);
    for (std::size_t k = 0; k < 3; ++k) {
        const QueuePair& q2 = env.qp(2);
        EXPECT_GE(got[k].host, q2.buf_host(0)) << "pair 2's own buffers";
        EXPECT_LT(got[k].host, q2.buf_host(0) + std::size_t{q2.total_bufs()} * q2.buf_bytes());
        env.fill_rx(2, got[k], k, 90);
    }
    env.dev(2).rx->flush_used();
    Recorder r0, r1, r2;
    EXPECT_EQ(env.qp(0).poll_rx(64, r0), 0u);
    EXPECT_EQ(env.qp(1).poll_rx(64, r1), 0u);
    EXPECT_EQ(env.qp(2).poll_rx(64, r2), 3u);

    uint32_t id = 0;
    ASSERT_TRUE(env.qp(1).alloc_buf(id));
    ASSERT_TRUE(env.qp(1).xmit(id, 64));
    env.qp(1).tx_flush();
    EXPECT_EQ(env.bells(0).tx_kick.consume(), 0u);
    EXPECT_EQ(env.bells(1).tx_kick.consume(), 1u);
    EXPECT_EQ(env.bells(2).tx_kick.consume(), 0u);
    EXPECT_EQ(env.complete_tx(0), 0u);
    EXPECT_EQ(env.complete_tx(1), 1u);
    EXPECT_EQ(env.complete_tx(2), 0u);
    EXPECT_EQ(env.qp(1).free_old_xmit(), 1u);
}

}  // namespace
}  // namespace pvnet::frontend
