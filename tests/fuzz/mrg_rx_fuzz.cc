// Fuzz target: QueuePair's mergeable receive (Linux receive_mergeable)
// against a hostile device that writes used entries, used.idx and the
// num_buffers of the buffers it names (STYLE.md §6 "The frontend checks used
// entries the same way"; §11 "Fuzz").
//
// Input, read front to back (missing bytes read as zero):
//   header   rx ring size 2..64, buffer size (64, 200 or 2048 bytes),
//            EVENT_IDX
//   op list  use the buffer at an avail slot (len and num_buffers fuzzed),
//            write a raw used element (any id and len), publish used.idx
//            (by 0..7, or to any value), poll_rx_packets with a budget
//            (deliver keeps the pieces or gives them back), free what was
//            kept, refill
//
// Invariants: every packet has 1..rx_size pieces of distinct buffers in the
// pool's range, each piece where buf_host says, no longer than a buffer, the
// first longer than the header; a buffer is never delivered while kept;
// free + in flight on the ring + kept = all buffers, after every op; a broken
// ring stays broken.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/frontend/virtio_net.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::fuzz {
namespace {

using frontend::QueuePair;
using frontend::RxPiece;
using virtio::SplitRingLayout;

constexpr uint64_t kBase = 0x100000;
constexpr std::size_t kMaxOps = 256;
constexpr std::array<uint32_t, 3> kBufBytes = {64, 200, 2048};

enum class Op : uint8_t { Use, RawUsed, Publish, PublishRaw, Poll, FreeKept, Refill, Count };

struct Doorbells {
    notify::EventFd rx_kick, tx_kick, rx_call, tx_call;
};

notify::EventFd must_fd() {
    auto r = notify::EventFd::create();
    check(r.has_value());
    return std::move(r.value());
}

Doorbells& bells() {
    static Doorbells* b = new Doorbells{must_fd(), must_fd(), must_fd(), must_fd()};
    return *b;
}

class Run {
public:
    Run(Reader& in) : in_(in) {
        const uint8_t h = in_.u8();
        cfg_.rx_size = static_cast<uint16_t>(2u << (h % 6));
        cfg_.tx_size = 2;
        cfg_.buf_bytes = kBufBytes[(h >> 3) % kBufBytes.size()];
        cfg_.event_idx = (h & 0x80) != 0;
        cfg_.mergeable_rx = true;
        const std::size_t bytes = frontend::VirtioNet::area_bytes(cfg_);
        region_.emplace(guarded_region(bytes, "fuzz-mrg-rx"));
        check(table_.add(mem::GuestAddr(kBase), region_->bytes()).has_value());
        const frontend::VirtioNetFds fds{&bells().rx_kick, &bells().tx_kick, &bells().rx_call,
                                         &bells().tx_call};
        auto n = frontend::VirtioNet::create(table_, mem::GuestAddr(kBase), bytes, cfg_,
                                             std::span<const frontend::VirtioNetFds>(&fds, 1));
        check(n.has_value());
        net_ = std::move(*n);
        kept_flag_.assign(qp().total_bufs(), 0);
        qp().try_fill_recv();
        balance();
    }

    void step() {
        const bool was_broken = qp().rx_queue().broken();
        switch (static_cast<Op>(in_.u8() % static_cast<uint8_t>(Op::Count))) {
            case Op::Use: use(); break;
            case Op::RawUsed: raw_used(in_.u16(), in_.u32()); break;
            case Op::Publish: publish(static_cast<uint16_t>(used_idx_ + in_.u8() % 8)); break;
            case Op::PublishRaw: publish(in_.u16()); break;
            case Op::Poll: poll(); break;
            case Op::FreeKept: free_kept(); break;
            case Op::Refill: qp().try_fill_recv(); break;
            case Op::Count: break;
        }
        check(!was_broken || qp().rx_queue().broken());
        balance();
    }

private:
    QueuePair& qp() { return net_->queue_pair(0); }
    std::byte* host(uint64_t gpa) { return region_->host() + (gpa - kBase); }
    const ring::SplitRingAddrs& rx() { return qp().rx_addrs(); }

    /// An honest-looking use: the head at an avail slot, a fuzzed len, and
    /// (if the buffer is big enough) a fuzzed num_buffers in its header.
    void use() {
        const uint16_t slot = static_cast<uint16_t>(in_.u8() % rx().size);
        uint16_t head = 0;
        std::memcpy(&head, host(rx().avail.value) + SplitRingLayout::avail_ring_off(slot),
                    sizeof head);
        head = virtio::le_to_host(head);
        const uint32_t len = in_.u16() % (cfg_.buf_bytes + 8);
        const uint16_t num = in_.u8() < 200 ? static_cast<uint16_t>(in_.u8() % 6) : in_.u16();
        if (head < rx().size) {
            virtio::virtq_desc d;
            std::memcpy(&d, host(rx().desc.value) + 16u * head, sizeof d);
            const uint64_t gpa = d.addr.get();
            // Only inside the buffer pool: the descriptor is the driver's own.
            if (gpa >= kBase && gpa + 12 <= kBase + region_->size()) {
                const uint16_t le = virtio::host_to_le(num);
                std::memcpy(host(gpa) + offsetof(virtio::virtio_net_hdr, num_buffers), &le,
                            sizeof le);
            }
        }
        raw_used(head, len);
    }

    void raw_used(uint32_t id, uint32_t len) {
        virtio::virtq_used_elem e{};
        e.id.set(id);
        e.len.set(len);
        const uint16_t slot = static_cast<uint16_t>(staged_++ & (rx().size - 1u));
        std::memcpy(host(rx().used.value) + SplitRingLayout::used_ring_off(slot), &e, sizeof e);
    }

    void publish(uint16_t idx) {
        used_idx_ = idx;
        staged_ = idx;
        virtio::Le16 v{};
        v.set(idx);
        std::memcpy(host(rx().used.value) + SplitRingLayout::used_idx_off(), &v, sizeof v);
    }

    void poll() {
        const uint32_t budget = 1 + in_.u8() % 8;
        const bool keep = (in_.u8() & 1) != 0;
        qp().poll_rx_packets(budget, [&](std::span<const RxPiece> p) {
            check(!p.empty() && p.size() <= cfg_.rx_size);
            check(p[0].len > sizeof(virtio::virtio_net_hdr));
            for (const RxPiece& x : p) {
                check(x.buf_id < qp().total_bufs() && x.host == qp().buf_host(x.buf_id));
                check(x.len <= cfg_.buf_bytes);
                check(kept_flag_[x.buf_id] == 0);
                kept_flag_[x.buf_id] = 2;  // distinct within the packet
                volatile std::byte first = x.host[0];  // the memory is the pool's
                (void)first;
                if (x.len != 0) {
                    volatile std::byte last = x.host[x.len - 1];
                    (void)last;
                }
            }
            for (const RxPiece& x : p) {
                kept_flag_[x.buf_id] = keep ? 1 : 0;
                if (keep) kept_.push_back(x.buf_id);
            }
            return keep;
        });
    }

    void free_kept() {
        for (const uint32_t id : kept_) {
            kept_flag_[id] = 0;
            qp().free_buf(id);
        }
        kept_.clear();
    }

    /// free + in flight + kept = all buffers.
    void balance() {
        check(uint64_t{qp().free_bufs()} + qp().rx_queue().in_flight() + kept_.size() ==
              qp().total_bufs());
    }

    Reader& in_;
    frontend::VirtioNetConfig cfg_;
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::unique_ptr<frontend::VirtioNet> net_;
    std::vector<uint32_t> kept_;
    std::vector<uint8_t> kept_flag_;
    uint16_t used_idx_ = 0;
    uint16_t staged_ = 0;
};

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pvnet::fuzz::Reader in(data, size);
    pvnet::fuzz::Run run(in);
    for (std::size_t i = 0; i < pvnet::fuzz::kMaxOps && !in.empty(); ++i) run.step();
    return 0;
}
