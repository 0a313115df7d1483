// QueuePair's mergeable receive (Linux virtio_net receive_mergeable) against
// a SplitDeviceQueue playing a device on the same guest memory: packets in
// one and several buffers delivered as pieces, and a hostile device's
// num_buffers — 0, beyond the ring, naming buffers not used — each counted
// (rx_length_errors), its buffers back in the pool, the next packet intact.
// Used len beyond a buffer breaks the ring mid-packet without leaking
// buffers. Decided by counters, pool size and bytes; no timing.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "pvnet/virtio/virtio_config.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/virtio/le.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::frontend {
namespace {

using ring::DescChain;
using ring::PopStatus;
using ring::RingError;

constexpr uint64_t kBase = 0x100000;
constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
constexpr uint16_t kRxSize = 64;

notify::EventFd must_fd() {
    auto r = notify::EventFd::create();
    if (!r) throw std::runtime_error("EventFd::create");
    return std::move(r.value());
}

/// The guest driver (mergeable rx) and a device on its rx ring.
class Env {
public:
    Env() {
        cfg_.rx_size = cfg_.tx_size = kRxSize;
        cfg_.mergeable_rx = true;
        auto r = mem::MemoryRegion::create(VirtioNet::area_bytes(cfg_), "mrg_rx_test");
        if (!r) throw std::runtime_error("MemoryRegion::create");
        region_.emplace(std::move(r.value()));
        if (!table_.add(mem::GuestAddr(kBase), region_->bytes())) throw std::runtime_error("table");
        const VirtioNetFds fds{&rx_kick_, &tx_kick_, &rx_call_, &tx_call_};
        auto n = VirtioNet::create(table_, mem::GuestAddr(kBase), region_->size(), cfg_,
                                   std::span<const VirtioNetFds>(&fds, 1));
        if (!n) throw std::runtime_error("VirtioNet::create");
        net_ = std::move(*n);
        ring::DeviceQueueConfig c;
        c.addrs = qp().rx_addrs();
        c.features = cfg_.event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0;
        auto q = ring::SplitDeviceQueue::create(table_, c);
        if (!q) throw std::runtime_error("SplitDeviceQueue::create");
        dev_ = std::move(*q);
        qp().try_fill_recv();
    }

    QueuePair& qp() { return net_->queue_pair(0); }
    ring::SplitDeviceQueue& dev() { return *dev_; }

    /// The device writes `bytes` over the next buffers (each filled up to
    /// `per_buf`), stamps `num_buffers` in the first and stages one used
    /// entry per buffer; `lens` overrides the used lens when given.
    void put(const std::vector<std::byte>& bytes, uint16_t num_buffers, uint32_t per_buf,
             const std::vector<uint32_t>& lens = {}) {
        std::size_t off = 0;
        for (std::size_t k = 0; off < bytes.size() || k < lens.size(); ++k) {
            if (k >= lens.size() && !lens.empty()) break;
            ASSERT_EQ(dev_->pop(chain_), PopStatus::Ok);
            auto* p = static_cast<std::byte*>(chain_.iov[0].iov_base);
            const std::size_t n =
                std::min<std::size_t>({per_buf, chain_.in_bytes, bytes.size() - off});
            std::memcpy(p, bytes.data() + off, n);
            if (k == 0) {
                const uint16_t le = virtio::host_to_le(num_buffers);
                std::memcpy(p + offsetof(virtio::virtio_net_hdr, num_buffers), &le, sizeof le);
            }
            off += n;
            const uint32_t len = k < lens.size() ? lens[k] : static_cast<uint32_t>(n);
            ASSERT_TRUE(dev_->add_used(chain_.head, len).has_value());
        }
        dev_->flush_used();
    }

    /// Writes the used element before `used_idx`, then used.idx (what an
    /// honest device's add_used refuses to do).
    void raw_used(uint16_t used_idx, uint32_t id, uint32_t len) {
        const ring::SplitRingAddrs& a = qp().rx_addrs();
        std::byte* used = region_->host() + (a.used.value - kBase);
        virtio::virtq_used_elem el{};
        el.id.set(id);
        el.len.set(len);
        const auto slot = static_cast<uint16_t>((used_idx - 1u) & (a.size - 1u));
        std::memcpy(used + virtio::SplitRingLayout::used_ring_off(slot), &el, sizeof el);
        virtio::Le16 idx{};
        idx.set(used_idx);
        std::memcpy(used + virtio::SplitRingLayout::used_idx_off(), &idx, sizeof idx);
    }
    DescChain& chain() { return chain_; }

private:
    VirtioNetConfig cfg_;
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    notify::EventFd rx_kick_ = must_fd(), tx_kick_ = must_fd(), rx_call_ = must_fd(),
                    tx_call_ = must_fd();
    std::unique_ptr<VirtioNet> net_;
    std::unique_ptr<ring::SplitDeviceQueue> dev_;
    DescChain chain_;
};

std::vector<std::byte> packet(uint32_t len, uint8_t salt) {
    std::vector<std::byte> p(len);
    for (uint32_t i = 0; i < len; ++i) {
        p[i] = i < kHdr ? std::byte{0} : static_cast<std::byte>((i * 13u + salt) & 0xffu);
    }
    return p;
}

/// What poll_rx_packets delivered: each packet's bytes (num_buffers cleared)
/// and piece count; gives the buffers back.
struct Packets {
    std::vector<std::vector<std::byte>> bytes;
    std::vector<std::size_t> pieces;
    bool operator()(std::span<const RxPiece> p) {
        std::vector<std::byte> b;
        for (const RxPiece& x : p) b.insert(b.end(), x.host, x.host + x.len);
        if (b.size() >= kHdr)
            std::memset(b.data() + offsetof(virtio::virtio_net_hdr, num_buffers), 0, 2);
        bytes.push_back(std::move(b));
        pieces.push_back(p.size());
        return false;
    }
};

TEST(MrgRx, PacketsOfOneAndSeveralBuffersArriveAsPieces) {
    Env e;
    const uint32_t free0 = e.qp().free_bufs();
    const auto big = packet(5000, 1);  // 3 buffers of 2048
    const auto small = packet(100, 2);
    e.put(big, 3, 2048);
    e.put(small, 1, 2048);
    Packets got;
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 2u);
    ASSERT_EQ(got.bytes.size(), 2u);
    EXPECT_EQ(got.pieces[0], 3u);
    EXPECT_EQ(got.bytes[0], big);
    EXPECT_EQ(got.pieces[1], 1u);
    EXPECT_EQ(got.bytes[1], small);
    EXPECT_EQ(e.qp().stats().rx_merged_pkts.get(), 1u);
    EXPECT_EQ(e.qp().stats().rx_bytes.get(), 5100u);
    EXPECT_EQ(e.qp().free_bufs(), free0 + 4u) << "every piece back in the pool";
}

TEST(MrgRx, SingleBufferPollDropsAMultiBufferPacket) {
    Env e;
    const uint32_t free0 = e.qp().free_bufs();
    e.put(packet(3000, 1), 2, 2048);
    e.put(packet(60, 2), 1, 2048);
    uint32_t delivered = 0;
    EXPECT_EQ(e.qp().poll_rx(kNapiBudget,
                             [&](uint32_t, const std::byte*, uint32_t len) {
                                 EXPECT_EQ(len, 60u);
                                 ++delivered;
                                 return false;
                             }),
              2u);
    EXPECT_EQ(delivered, 1u);
    EXPECT_EQ(e.qp().stats().rx_drop_multi_buf.get(), 1u);
    EXPECT_EQ(e.qp().free_bufs(), free0 + 3u);
}

/// A hostile num_buffers: counted, its buffers freed, the next packet intact.
void expect_length_error(Env& e, uint16_t num, uint32_t bufs_used) {
    const uint32_t free0 = e.qp().free_bufs();
    const auto good = packet(300, 9);
    Packets got;
    e.put(good, 1, 2048);
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 2u);
    EXPECT_EQ(e.qp().stats().rx_length_errors.get(), 1u) << "num_buffers " << num;
    ASSERT_EQ(got.bytes.size(), 1u);
    EXPECT_EQ(got.bytes[0], good);
    EXPECT_EQ(e.qp().free_bufs(), free0 + bufs_used + 1u) << "no buffer leaked";
    EXPECT_FALSE(e.qp().rx_queue().broken());
}

TEST(MrgRxHostile, NumBuffersZero) {
    Env e;
    e.put(packet(200, 1), 0, 2048);
    expect_length_error(e, 0, 1);
}

TEST(MrgRxHostile, NumBuffersBeyondTheRing) {
    for (const uint16_t num : {uint16_t{kRxSize + 1}, uint16_t{0xffff}}) {
        Env e;
        e.put(packet(200, 1), num, 2048);
        expect_length_error(e, num, 1);
    }
}

TEST(MrgRxHostile, NumBuffersNamingBuffersNotUsedDropsThePacket) {
    // "rx error: buffers missing": 5 announced, 3 used; the next packet's
    // entries come later and are read as a packet of their own.
    Env e;
    const uint32_t free0 = e.qp().free_bufs();
    e.put(packet(5000, 1), 5, 2048);
    Packets got;
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 1u);
    EXPECT_TRUE(got.bytes.empty());
    EXPECT_EQ(e.qp().stats().rx_length_errors.get(), 1u);
    EXPECT_EQ(e.qp().free_bufs(), free0 + 3u);
    const auto good = packet(300, 9);
    e.put(good, 1, 2048);
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 1u);
    ASSERT_EQ(got.bytes.size(), 1u);
    EXPECT_EQ(got.bytes[0], good);
}

TEST(MrgRxHostile, FirstBufferNoLongerThanTheHeaderIsBadLen) {
    Env e;
    const uint32_t free0 = e.qp().free_bufs();
    e.put(packet(kHdr, 1), 2, 2048);
    Packets got;
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 1u);
    EXPECT_TRUE(got.bytes.empty());
    EXPECT_EQ(e.qp().stats().rx_drop_bad_len.get(), 1u);
    EXPECT_EQ(e.qp().stats().rx_length_errors.get(), 0u);
    EXPECT_EQ(e.qp().free_bufs(), free0 + 1u);
}

TEST(MrgRx, AZeroLengthFollowingPieceIsAllowed) {
    Env e;
    const auto p = packet(3000, 1);
    e.put(p, 3, 2048, {2048, 952, 0});
    Packets got;
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 1u);
    ASSERT_EQ(got.pieces.size(), 1u);
    EXPECT_EQ(got.pieces[0], 3u);
    EXPECT_EQ(got.bytes[0], p);
    EXPECT_EQ(e.qp().stats().rx_length_errors.get(), 0u);
}

TEST(MrgRxHostile, UsedLenBeyondAFollowingBufferBreaksTheRingWithoutLeaks) {
    // Buffer 1 of 2 claims 4096 bytes of a 2048-byte buffer: a ring rule
    // (UsedLenTooLong) broken mid-packet; the piece already reaped is freed.
    Env e;
    const uint32_t free0 = e.qp().free_bufs();
    e.put(packet(2048, 1), 2, 2048, {2048});
    ASSERT_EQ(e.dev().pop(e.chain()), PopStatus::Ok);
    e.raw_used(2, e.chain().head, 4096);
    Packets got;
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 1u);
    EXPECT_TRUE(got.bytes.empty());
    EXPECT_TRUE(e.qp().rx_queue().broken());
    EXPECT_EQ(e.qp().rx_queue().broken_reason(), RingError::UsedLenTooLong);
    EXPECT_EQ(e.qp().stats().rx_length_errors.get(), 1u);
    EXPECT_EQ(e.qp().free_bufs(), free0 + 1u);
    EXPECT_EQ(e.qp().poll_rx_packets(kNapiBudget, got), 0u) << "a broken ring is left alone";
}

}  // namespace
}  // namespace pvnet::frontend
