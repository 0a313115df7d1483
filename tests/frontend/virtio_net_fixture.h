// Shared by the virtio_net_*_test files: VirtioNet, the guest driver,
// against a SplitDeviceQueue playing the device on the same guest memory (one
// MemoryRegion at gpa 0x100000), with packet patterns and a deliver recorder.
#pragma once

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

namespace pvnet::frontend::fixture {

using mem::GuestAddr;
using ring::DescChain;
using ring::PopStatus;
using ring::RingError;
using ring::SplitDeviceQueue;
using Layout = virtio::SplitRingLayout;

inline constexpr uint64_t kBase = 0x100000;
inline constexpr uint32_t kHdr = sizeof(virtio::virtio_net_hdr);
/// Bounded sleeps: long enough for any scheduler, reached only on a bug.
inline constexpr int64_t kBoundUs = 5'000'000;

/// Byte `i` of packet `seq` (after the zeroed header).
inline std::byte pattern(uint64_t seq, std::size_t i) {
    return static_cast<std::byte>((seq * 31u + i * 7u + 1u) & 0xffu);
}
inline void write_packet(std::byte* p, uint64_t seq, uint32_t len) {
    for (uint32_t i = 0; i < len; ++i) p[i] = i < kHdr ? std::byte{0} : pattern(seq, i);
}
inline bool packet_ok(const std::byte* p, uint64_t seq, uint32_t len) {
    for (uint32_t i = 0; i < len; ++i) {
        if (p[i] != (i < kHdr ? std::byte{0} : pattern(seq, i))) return false;
    }
    return true;
}

inline notify::EventFd must_fd() {
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

}  // namespace pvnet::frontend::fixture
