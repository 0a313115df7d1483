// Two VhostNet workers joined by a PeerPort pair (DESIGN.md layer 6, "a
// two-port switch"): guest A's frames cross A's tx ring, A's handle_tx, the
// PeerPort (header validated there), B's handle_rx (woken through the
// port's rx_fd in event mode) and B's rx ring into guest B's buffers. Every
// 1000th frame carries a bad header: dropped and counted at A's port (the
// device counts it in tx_drop_port, not as sent), never seen by B. Each
// guest is the in-process pairing (pair::SharedMemoryPair: memory in two
// views, doorbells, the device description); the test plays both drivers.
// Every wait is bounded.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/pair/shared_memory_pair.h"
#include "pvnet/port/peer_port.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::backend {
namespace {

using mem::GuestAddr;
using port::PeerPort;
using Dev = VhostNet<PeerPort>;
constexpr uint32_t kHdr = PeerPort::kHdrBytes;

/// One guest: the pairing's memory with both rings and kSlots packet
/// buffers, a driver queue on each ring, and its device served by `port`,
/// configured from the pairing's device description.
class Guest {
public:
    static constexpr uint64_t kBase = pair::kGuestBase;
    static constexpr uint16_t kSize = 256;
    static constexpr uint64_t kRingArea = 64 * 1024;
    static constexpr uint32_t kSlotBytes = 2048;
    static constexpr uint32_t kSlots = kSize;

    explicit Guest(PeerPort& port) {
        if (auto err = pairing_.setup_memory(2 * kRingArea + uint64_t{kSlots} * kSlotBytes, 2,
                                             "peer_port_e2e")) {
            throw std::runtime_error(*err);
        }
        const std::array<ring::SplitRingAddrs, 2> rings{
            ring::split_ring_addrs_at(GuestAddr(kBase), kSize),
            ring::split_ring_addrs_at(GuestAddr(kBase + kRingArea), kSize)};
        ring::DriverQueueConfig dq;
        dq.addrs = rings[rx_vring(0)];
        auto rxd = ring::SplitDriverQueue::create(pairing_.guest_table(), dq);
        dq.addrs = rings[tx_vring(0)];
        auto txd = ring::SplitDriverQueue::create(pairing_.guest_table(), dq);
        if (!rxd || !txd) throw std::runtime_error("SplitDriverQueue::create");
        rxd_ = std::move(*rxd);
        txd_ = std::move(*txd);
        const uint64_t features = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1);
        auto d = Dev::create(pairing_.device_setup(features, rings), VhostNetOptions{}, port);
        if (!d) throw std::runtime_error(std::string(to_string(d.error())));
        dev_ = std::move(*d);
    }

    Dev& dev() { return *dev_; }
    ring::SplitDriverQueue& rxd() { return *rxd_; }
    ring::SplitDriverQueue& txd() { return *txd_; }
    void kick_rx() { pairing_.kick(rx_vring(0)).signal(); }
    void kick_tx() { pairing_.kick(tx_vring(0)).signal(); }
    std::byte* slot(uint64_t token) const { return pairing_.guest_host(slot_gpa(token)); }
    static GuestAddr slot_gpa(uint64_t token) {
        return GuestAddr(kBase + 2 * kRingArea + token * kSlotBytes);
    }

private:
    pair::SharedMemoryPair pairing_;
    std::unique_ptr<ring::SplitDriverQueue> rxd_, txd_;
    std::unique_ptr<Dev> dev_;  ///< destroyed first: the worker stops before the memory goes
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
    // A's device: every chain used; the port took the good ones (Sent) and
    // refused the bad headers for good (Dropped). Any Retry (B's queue full)
    // put the chain back, so it is in neither count.
    const VhostNetStats& as = a.dev().stats();
    EXPECT_EQ(as.tx_pkts.get(), kFrames - kFrames / 1000);
    EXPECT_EQ(as.tx_drop_port.get(), kFrames / 1000);
    EXPECT_EQ(as.tx_retry.get(), pa.stats.tx_retry_queue_full.get());
    EXPECT_EQ(as.tx_drop_bad_chain.get(), 0u);
    EXPECT_EQ(b.dev().stats().rx_pkts.get(), received);
    EXPECT_EQ(b.dev().stats().rx_drop_no_room.get(), 0u);
    EXPECT_EQ(b.dev().stats().rx_drop_bad_chain.get(), 0u);
    EXPECT_EQ(a.dev().status(), 0u);
    EXPECT_EQ(b.dev().status(), 0u);
}

}  // namespace
}  // namespace pvnet::backend
