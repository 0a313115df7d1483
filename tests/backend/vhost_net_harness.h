// The test bench of VhostNet's tests: guest memory in one MemoryRegion
// (gpa 0x100000) holding both split rings and the packet slots, a
// test-driven SplitDriverQueue on each ring (the guest), the four
// doorbells, a FakePort (the world) and the device under test. Handlers
// can be called directly (no worker) or the worker started.
#pragma once

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pvnet/backend/vhost_net.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/pair/shared_memory_pair.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/coalescer.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/le.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::backend::harness {

using mem::GuestAddr;
using ring::AddStatus;
using ring::Buf;
using ring::RingError;
using ring::SplitRingAddrs;
using ring::UsedBuf;
using Layout = virtio::SplitRingLayout;

inline constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
/// Bytes a frame needs so the port can check its sequence number.
inline constexpr uint32_t kSeqBytes = kHdr + 8;

/// The byte at offset `i` of packet `seq` (header bytes excluded).
inline std::byte pattern(uint64_t seq, std::size_t i) {
    return static_cast<std::byte>((seq * 31u + i * 7u + 1u) & 0xffu);
}

/// Lays out packet `seq` of `len` bytes (hdr + frame) at `p`: a zeroed
/// virtio_net_hdr, then the seq (when it fits), then the pattern.
inline void write_packet(std::byte* p, uint64_t seq, uint32_t len) {
    for (uint32_t i = 0; i < len; ++i) p[i] = i < kHdr ? std::byte{0} : pattern(seq, i);
    if (len >= kSeqBytes) std::memcpy(p + kHdr, &seq, sizeof seq);
}

/// Checks a packet written by write_packet; returns its seq or nullopt.
inline std::optional<uint64_t> check_packet(const std::byte* p, uint32_t len) {
    if (len < kSeqBytes) return std::nullopt;
    uint64_t seq = 0;
    std::memcpy(&seq, p + kHdr, sizeof seq);
    for (uint32_t i = 0; i < kHdr; ++i) {
        if (p[i] != std::byte{0}) return std::nullopt;
    }
    for (uint32_t i = kSeqBytes; i < len; ++i) {
        if (p[i] != pattern(seq, i)) return std::nullopt;
    }
    return seq;
}

/// The world behind the backend. rx: a configurable number of packets
/// (or a flood) of rx_len bytes each (hdr + frame). tx: records what the
/// guest sent. Hooks let a test play a guest that reacts during a run.
struct FakePort {
    static constexpr uint64_t kFlood = UINT64_MAX;

    uint64_t rx_left = 0;  ///< packets waiting; kFlood: always one more
    uint32_t rx_len = 64;  ///< bytes recv() writes
    std::vector<uint32_t> rx_lens;  ///< if set: packet `seq` is rx_lens[seq % size] bytes
    bool peek = false;     ///< peek_len() knows the next length (else 0: unknown)
    uint64_t rx_seq = 0;   ///< packets delivered into guest buffers
    uint64_t rx_no_room = 0;
    uint64_t recv_calls = 0;

    std::vector<uint32_t> sent_lens;
    std::vector<uint64_t> sent_seqs;  ///< seqs of the packets that carried one
    uint64_t sent_bytes = 0;
    uint64_t send_bad = 0;  ///< iovecs disagree with len, or bad bytes

    std::function<void()> on_send;  ///< after each send
    std::function<void()> on_recv;  ///< after each recv

    /// rx_fd() for the worker's epoll (-1: none, the worker polls rx_pending).
    int fd = -1;
    int rx_fd() const noexcept { return fd; }

    bool rx_pending() noexcept { return rx_left != 0; }
    uint32_t next_len() const noexcept {
        return rx_lens.empty() ? rx_len : rx_lens[rx_seq % rx_lens.size()];
    }
    uint32_t peek_len() noexcept { return peek && rx_left != 0 ? next_len() : 0; }

    uint32_t recv(std::span<const iovec> dst) noexcept {
        ++recv_calls;
        if (rx_left != kFlood) --rx_left;
        std::size_t room = 0;
        for (const iovec& v : dst) room += v.iov_len;
        const uint32_t len = next_len();
        uint32_t ret = 0;
        if (room < len) {
            ++rx_no_room;  // dropped: consumed, nothing written
        } else {
            std::vector<std::byte> pkt(len);
            write_packet(pkt.data(), rx_seq, len);
            std::size_t off = 0;
            for (const iovec& v : dst) {
                const std::size_t n = std::min<std::size_t>(v.iov_len, len - off);
                std::memcpy(v.iov_base, pkt.data() + off, n);
                off += n;
                if (off == len) break;
            }
            ++rx_seq;
            ret = len;
        }
        if (on_recv) on_recv();
        return ret;
    }

    /// While > 0, send() says Retry (the port is full) and counts it down.
    uint32_t tx_retry_left = 0;
    uint64_t send_retries = 0;

    port::SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        if (tx_retry_left != 0) {
            --tx_retry_left;
            ++send_retries;
            return port::SendResult::Retry;
        }
        std::vector<std::byte> pkt;
        for (const iovec& v : src) {
            const auto* b = static_cast<const std::byte*>(v.iov_base);
            pkt.insert(pkt.end(), b, b + v.iov_len);
        }
        bool ok = pkt.size() == len;
        if (ok && len >= kSeqBytes) {
            const auto seq = check_packet(pkt.data(), len);
            if (seq) sent_seqs.push_back(*seq);
            ok = seq.has_value();
        }
        if (!ok) ++send_bad;
        sent_lens.push_back(len);
        sent_bytes += len;
        if (on_send) on_send();
        return ok ? port::SendResult::Sent : port::SendResult::Dropped;
    }
};

struct Options {
    uint16_t size = 256;
    bool event_idx = false;
    Weight tx_weight{};
    Weight rx_weight{};
    RunMode mode = RunMode::Event;
    notify::CoalesceParams rx_coalesce{};
    notify::CoalesceParams tx_coalesce{};
    uint32_t busyloop_usecs = 0;
    bool mergeable_rx = false;
    uint64_t extra_features = 0;  ///< e.g. GUEST_TSO4: OR-ed into the feature word
    int port_rx_fd = -1;          ///< FakePort::fd
};

/// Guest memory (the in-process pairing's two views), both rings with a
/// test-driven driver on each, the doorbells, the port and the device
/// under test, configured from the pairing's device description. `Port`: a
/// FakePort, or one that adds optional port concepts to it.
template <typename Port = FakePort>
class BasicHarness {
public:
    static constexpr uint64_t kBase = pair::kGuestBase;
    static constexpr uint64_t kRingArea = 1024 * 1024;  ///< per ring (size <= 32768)
    static constexpr uint32_t kSlotBytes = 2048;
    static constexpr uint32_t kSlots = 2048;
    static constexpr uint64_t kMemBytes = 2 * kRingArea + uint64_t{kSlots} * kSlotBytes;
    static constexpr uint64_t kDataGpa = kBase + 2 * kRingArea;

    using Dev = VhostNet<Port>;

    explicit BasicHarness(const Options& o) : opt_(o) {
        if (ring::split_ring_bytes(o.size) > kRingArea) throw std::logic_error("ring too big");
        if (auto err = pairing_.setup_memory(kMemBytes, 2, "vhost_net_test")) {
            throw std::runtime_error(*err);
        }
        rx_addrs_ = ring::split_ring_addrs_at(GuestAddr(kBase), o.size);
        tx_addrs_ = ring::split_ring_addrs_at(GuestAddr(kBase + kRingArea), o.size);

        ring::DriverQueueConfig dq;
        dq.event_idx = o.event_idx;
        dq.addrs = rx_addrs_;
        auto rxd = ring::SplitDriverQueue::create(pairing_.guest_table(), dq);
        dq.addrs = tx_addrs_;
        auto txd = ring::SplitDriverQueue::create(pairing_.guest_table(), dq);
        if (!rxd || !txd) throw std::runtime_error("SplitDriverQueue::create");
        rxd_ = std::move(*rxd);
        txd_ = std::move(*txd);

        port.fd = o.port_rx_fd;
        VhostNetOptions opt;
        opt.rx_weight = o.rx_weight;
        opt.tx_weight = o.tx_weight;
        opt.mode = o.mode;
        opt.rx_coalesce = o.rx_coalesce;
        opt.tx_coalesce = o.tx_coalesce;
        opt.busyloop_usecs = o.busyloop_usecs;
        auto d = Dev::create(setup(), opt, port);
        if (!d) throw std::runtime_error("VhostNet::create");
        dev_ = std::move(*d);
    }

    /// The device description the pairing produces for these rings.
    DeviceSetup setup() const {
        const std::array<SplitRingAddrs, 2> rings{rx_addrs_, tx_addrs_};
        return pairing_.device_setup(features(), rings);
    }
    uint64_t features() const {
        uint64_t f = virtio::feature_mask(virtio::VIRTIO_F_VERSION_1) | opt_.extra_features;
        if (opt_.event_idx) f |= virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX);
        if (opt_.mergeable_rx) f |= virtio::feature_mask(virtio::VIRTIO_NET_F_MRG_RXBUF);
        return f;
    }

    Dev& dev() { return *dev_; }
    const VhostNetStats& stats() const { return dev_->stats(); }
    ring::SplitDriverQueue& rxd() { return *rxd_; }
    ring::SplitDriverQueue& txd() { return *txd_; }
    const notify::EventFd& rx_call() const { return pairing_.call(rx_vring(0)); }
    const notify::EventFd& tx_call() const { return pairing_.call(tx_vring(0)); }
    const notify::EventFd& rx_kick() const { return pairing_.kick(rx_vring(0)); }
    const notify::EventFd& tx_kick() const { return pairing_.kick(tx_vring(0)); }
    const SplitRingAddrs& rx_addrs() const { return rx_addrs_; }
    const SplitRingAddrs& tx_addrs() const { return tx_addrs_; }
    uint16_t size() const { return opt_.size; }

    // ---- guest memory ------------------------------------------------------

    static GuestAddr slot_gpa(uint64_t token) {
        return GuestAddr(kDataGpa + (token % kSlots) * kSlotBytes);
    }
    std::byte* host(GuestAddr gpa) const { return pairing_.guest_host(gpa); }

    // ---- the guest driver ----------------------------------------------------

    /// Queues tx packet `seq` of `len` bytes (hdr + frame); not yet published.
    AddStatus add_tx(uint64_t seq, uint32_t len) {
        write_packet(host(slot_gpa(seq)), seq, len);
        const Buf b{slot_gpa(seq), len};
        return txd_->add(std::span<const Buf>(&b, 1), {}, seq);
    }
    /// Queues and publishes tx packets [first, first + n), all `len` bytes.
    void add_tx_burst(uint64_t first, uint32_t n, uint32_t len) {
        for (uint64_t s = first; s < first + n; ++s) {
            if (add_tx(s, len) != AddStatus::Ok) throw std::logic_error("add_tx");
        }
        txd_->publish();
    }
    /// Queues an rx buffer `token` of `len` bytes; not yet published.
    AddStatus add_rx(uint64_t token, uint32_t len = kSlotBytes) {
        const Buf b{slot_gpa(token), len};
        return rxd_->add({}, std::span<const Buf>(&b, 1), token);
    }
    void add_rx_burst(uint64_t first, uint32_t n, uint32_t len = kSlotBytes) {
        for (uint64_t t = first; t < first + n; ++t) {
            if (add_rx(t, len) != AddStatus::Ok) throw std::logic_error("add_rx");
        }
        rxd_->publish();
    }
    static std::vector<UsedBuf> reap(ring::SplitDriverQueue& q) {
        std::vector<UsedBuf> out;
        UsedBuf u;
        while (q.get_used(u)) out.push_back(u);
        return out;
    }

    // ---- raw ring fields (what the driver queue cannot express) -------------

    uint16_t read16(GuestAddr gpa) const {
        uint16_t v = 0;
        std::memcpy(&v, host(gpa), sizeof v);
        return virtio::le_to_host(v);
    }
    void write16(GuestAddr gpa, uint16_t v) const {
        const uint16_t le = virtio::host_to_le(v);
        std::memcpy(host(gpa), &le, sizeof le);
    }
    uint16_t used_flags(const SplitRingAddrs& a) const {
        return read16(a.used + Layout::used_flags_off());
    }
    uint16_t used_idx(const SplitRingAddrs& a) const {
        return read16(a.used + Layout::used_idx_off());
    }
    uint16_t avail_event(const SplitRingAddrs& a) const {
        return read16(a.used + Layout::avail_event_off(a.size));
    }
    void set_avail_slot(const SplitRingAddrs& a, uint16_t slot, uint16_t head) const {
        write16(a.avail + Layout::avail_ring_off(slot), head);
    }
    void set_avail_idx(const SplitRingAddrs& a, uint16_t idx) const {
        write16(a.avail + Layout::avail_idx_off(), idx);
    }
    void write_desc(const SplitRingAddrs& a, uint16_t i, uint64_t gpa, uint32_t len, uint16_t flags,
                    uint16_t next) const {
        virtio::virtq_desc d{};
        d.addr.set(gpa);
        d.len.set(len);
        d.flags.set(flags);
        d.next.set(next);
        std::memcpy(host(a.desc + 16u * uint64_t{i}), &d, sizeof d);
    }

    Port port;

private:
    Options opt_;
    pair::SharedMemoryPair pairing_;
    SplitRingAddrs rx_addrs_, tx_addrs_;
    std::unique_ptr<ring::SplitDriverQueue> rxd_, txd_;
    std::unique_ptr<Dev> dev_;
};

using Harness = BasicHarness<>;
using Dev = Harness::Dev;

/// Waits until `done()` or 10 s; true if it held (every wait is bounded).
/// Queues `n` 64-byte packets (seqs from `seq` on) on the guest's tx ring
/// and publishes them with one tx_flush; false if a buffer or slot lacked.
inline bool xmit_packets(frontend::QueuePair& qp, uint64_t& seq, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t id = 0;
        if (!qp.alloc_buf(id)) qp.free_old_xmit();
        if (!qp.alloc_buf(id)) return false;
        write_packet(qp.buf_host(id), seq++, 64);
        if (!qp.xmit(id, 64)) return false;
    }
    qp.tx_flush();
    return true;
}

inline bool wait_until(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

/// Runs handle_tx once; returns the packets that reached the port.
inline uint64_t run_tx(Harness& h) {
    const std::size_t before = h.port.sent_lens.size();
    h.dev().handle_tx();
    return h.port.sent_lens.size() - before;
}

/// Packets handle_rx has handled: delivered, or dropped with a reason.
inline uint64_t rx_handled(const VhostNetStats& s) {
    return s.rx_pkts.get() + s.rx_drop_bad_chain.get() + s.rx_drop_no_room.get();
}

/// Runs handle_rx once; returns the packets it handled (delivered or dropped).
inline uint64_t run_rx(Harness& h) {
    const uint64_t before = rx_handled(h.stats());
    h.dev().handle_rx();
    return rx_handled(h.stats()) - before;
}

/// Notifications are re-armed on `a` (the device waits for a kick).
inline void expect_rearmed(const Harness& h, const SplitRingAddrs& a, uint16_t last_avail_idx,
                           bool event_idx) {
    if (event_idx) {
        EXPECT_EQ(h.avail_event(a), last_avail_idx);
    } else {
        EXPECT_EQ(h.used_flags(a), 0);
    }
}

/// Cases run with and without VIRTIO_RING_F_EVENT_IDX; each file instantiates
/// it with event_idx_name.
class EventIdx : public ::testing::TestWithParam<bool> {};
inline std::string event_idx_name(const ::testing::TestParamInfo<bool>& p) {
    return p.param ? "EventIdx" : "NoEventIdx";
}

}  // namespace pvnet::backend::harness
