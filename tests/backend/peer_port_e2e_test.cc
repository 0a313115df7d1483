// Two VhostNet workers joined by a PeerPort pair (DESIGN.md layer 6, "a
// two-port switch"): guest A's frames cross A's tx ring, A's handle_tx, the
// PeerPort (header validated there), B's handle_rx (woken through the
// port's rx_fd in event mode) and B's rx ring into guest B's buffers. Every
// 1000th frame carries a bad header: dropped and counted at A's port, never
// seen by B. The test plays both guests; every wait is bounded.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/peer_port.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {
namespace {

using mem::GuestAddr;
using port::PeerPort;
using Dev = VhostNet<PeerPort>;
constexpr uint32_t kHdr = PeerPort::kHdrBytes;

/// One guest: memory with both rings and kSlots packet buffers, a driver
/// queue on each ring, the doorbells, and its device served by `port`.
class Guest {
public:
    static constexpr uint64_t kBase = 0x100000;
    static constexpr uint16_t kSize = 256;
    static constexpr uint64_t kRingArea = 64 * 1024;
    static constexpr uint32_t kSlotBytes = 2048;
    static constexpr uint32_t kSlots = kSize;

    explicit Guest(PeerPort& port) {
        auto r = mem::MemoryRegion::create(2 * kRingArea + uint64_t{kSlots} * kSlotBytes,
                                           "peer_port_e2e");
        if (!r) throw std::runtime_error("MemoryRegion::create");
        region_.emplace(std::move(r.value()));
        if (!table_.add(GuestAddr(kBase), region_->bytes())) throw std::runtime_error("table");
        const auto rx = ring::split_ring_addrs_at(GuestAddr(kBase), kSize);
        const auto tx = ring::split_ring_addrs_at(GuestAddr(kBase + kRingArea), kSize);
        ring::DriverQueueConfig dq;
        dq.addrs = rx;
        auto rxd = ring::SplitDriverQueue::create(table_, dq);
        dq.addrs = tx;
        auto txd = ring::SplitDriverQueue::create(table_, dq);
        if (!rxd || !txd) throw std::runtime_error("SplitDriverQueue::create");
        rxd_ = std::move(*rxd);
        txd_ = std::move(*txd);
        for (auto* e : {&rx_kick_, &tx_kick_, &rx_call_, &tx_call_}) {
            auto fd = notify::EventFd::create();
            if (!fd) throw std::runtime_error("EventFd::create");
            e->emplace(std::move(*fd));
        }
        VhostNetConfig cfg;
        cfg.rx.addrs = rx;
        cfg.tx.addrs = tx;
        auto d = Dev::create(table_, cfg,
                             VhostNetFds{&*rx_kick_, &*tx_kick_, &*rx_call_, &*tx_call_}, port);
        if (!d) throw std::runtime_error("VhostNet::create");
        dev_ = std::move(*d);
    }

    Dev& dev() { return *dev_; }
    ring::SplitDriverQueue& rxd() { return *rxd_; }
    ring::SplitDriverQueue& txd() { return *txd_; }
    void kick_rx() { rx_kick_->signal(); }
    void kick_tx() { tx_kick_->signal(); }
    std::byte* slot(uint64_t token) const {
        return region_->host() + 2 * kRingArea + token * kSlotBytes;
    }
    static GuestAddr slot_gpa(uint64_t token) {
        return GuestAddr(kBase + 2 * kRingArea + token * kSlotBytes);
    }

private:
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::unique_ptr<ring::SplitDriverQueue> rxd_, txd_;
    std::optional<notify::EventFd> rx_kick_, tx_kick_, rx_call_, tx_call_;
    std::unique_ptr<Dev> dev_;
};

uint32_t frame_bytes(uint64_t seq) { return static_cast<uint32_t>(60 + seq % 1455); }
std::byte pattern(uint64_t seq, uint32_t i) {
    return std::byte{static_cast<uint8_t>(seq * 13 + i)};
}
bool bad_hdr(uint64_t seq) { return seq % 1000 == 999; }

TEST(PeerPortEndToEnd, FramesCrossTwoWorkersAndBadHeadersStopAtThePort) {
    constexpr uint64_t kFrames = 100'000;
    constexpr uint64_t kWindow = 1024;
    port::PeerPortConfig cfg;
    cfg.tx_offloads = net::Offloads::all();
    auto pair = PeerPort::create_pair(cfg, cfg);
    ASSERT_TRUE(pair.has_value());
    PeerPort& pa = *pair.value().first;
    PeerPort& pb = *pair.value().second;
    Guest a(pa), b(pb);

    // Guest B offers every buffer; its device sleeps until A's frames arrive.
    for (uint64_t t = 0; t < Guest::kSlots; ++t) {
        const ring::Buf buf{Guest::slot_gpa(t), Guest::kSlotBytes};
        ASSERT_EQ(b.rxd().add({}, std::span<const ring::Buf>(&buf, 1), t), ring::AddStatus::Ok);
    }
    b.rxd().publish();
    a.dev().start();
    b.dev().start();
    b.kick_rx();

    std::vector<uint64_t> free_tx;
    for (uint64_t t = 0; t < Guest::kSlots; ++t) free_tx.push_back(t);
    uint64_t next = 0, received = 0, last_seq = 0, bad = 0, bad_hdr_seen = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (received + pa.stats.tx_drops() < kFrames &&
           std::chrono::steady_clock::now() < deadline) {
        // Guest A: reclaim sent buffers, then transmit into every free one.
        ring::UsedBuf u;
        while (a.txd().get_used(u)) free_tx.push_back(u.token);
        bool added = false;
        // At most kWindow frames between A's ring and B's buffers: the port's
        // queue (4 MiB) then never fills, so every good frame must arrive.
        while (!free_tx.empty() && next < kFrames &&
               next - received - pa.stats.tx_drops() < kWindow) {
            const uint64_t t = free_tx.back();
            std::byte* p = a.slot(t);
            virtio::virtio_net_hdr h{};
            if (bad_hdr(next)) h.flags = 0x10;  // a flag bit virtio-net does not define
            std::memcpy(p, &h, kHdr);
            const uint32_t n = frame_bytes(next);
            for (uint32_t i = 0; i < n; ++i) p[kHdr + i] = pattern(next, i);
            std::memcpy(p + kHdr, &next, sizeof next);
            const ring::Buf buf{Guest::slot_gpa(t), kHdr + n};
            if (a.txd().add(std::span<const ring::Buf>(&buf, 1), {}, t) != ring::AddStatus::Ok) {
                break;
            }
            free_tx.pop_back();
            ++next;
            added = true;
        }
        if (added && a.txd().kick_prepare()) a.kick_tx();
        // Guest B: check what arrived, give the buffers back.
        bool refilled = false;
        while (b.rxd().get_used(u)) {
            const std::byte* p = b.slot(u.token);
            uint64_t seq = 0;
            std::memcpy(&seq, p + kHdr, sizeof seq);
            virtio::virtio_net_hdr want{};
            want.num_buffers.set(1);
            const uint32_t n = frame_bytes(seq);
            bool ok = u.len == kHdr + n && std::memcmp(p, &want, kHdr) == 0 &&
                      (received == 0 || seq > last_seq) && p[kHdr + n - 1] == pattern(seq, n - 1);
            if (bad_hdr(seq)) ++bad_hdr_seen;
            if (!ok) ++bad;
            last_seq = seq;
            ++received;
            const ring::Buf buf{Guest::slot_gpa(u.token), Guest::kSlotBytes};
            (void)b.rxd().add({}, std::span<const ring::Buf>(&buf, 1), u.token);
            refilled = true;
        }
        if (refilled && b.rxd().kick_prepare()) b.kick_rx();
        if (!added && !refilled) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    a.dev().stop();
    b.dev().stop();

    ASSERT_EQ(received + pa.stats.tx_drops(), kFrames) << "timed out";
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(bad_hdr_seen, 0u);
    EXPECT_EQ(pa.stats.tx_pkts.get(), kFrames);
    EXPECT_EQ(pa.stats.tx_drop_bad_hdr.get(net::HdrError::UnknownFlag), kFrames / 1000);
    EXPECT_EQ(pa.stats.tx_drops(), pa.stats.tx_drop_bad_hdr.total());
    EXPECT_EQ(received, kFrames - kFrames / 1000);
    EXPECT_EQ(pb.stats.rx_pkts.get(), received);
    EXPECT_EQ(a.dev().stats().tx_pkts.get(), kFrames);
    EXPECT_EQ(b.dev().stats().rx_pkts.get(), received);
    EXPECT_EQ(b.dev().stats().rx_drop_no_room.get(), 0u);
}

}  // namespace
}  // namespace pvnet::backend
