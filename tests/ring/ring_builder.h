// RingBuilder: a split virtqueue laid out in real shared memory for tests,
// with the test playing the other side of the ring — a driver (or device)
// that may be well-behaved or hostile. The role of rust-vmm's
// virtio-queue/src/mock.rs and Firecracker's virtio/test_utils.rs
// (STYLE.md §11).
//
// What it owns:
//   - a MemoryRegion (memfd, guard pages) mapped at guest address `base`
//     (0x10000 by default: non-zero, so a guest address used as a host
//     pointer, or the reverse, faults or fails a comparison);
//   - a MemoryTable holding that region and any extra regions a test adds
//     (adjacent, read-only, far away, huge and sparse);
//   - a split ring of `size` at `base` (split_ring_addrs_at), then a data
//     area handed out by a bump allocator (alloc / alloc_buf).
//
// What it does:
//   - raw writers that poke any value into any ring field, as a hostile
//     driver would (write_desc, write_indirect_table, set_avail_slot,
//     set_avail_idx, set_avail_flags, set_used_event) and as a hostile device
//     would (set_used_elem, set_used_idx, set_used_flags, set_avail_event);
//   - readers for what the other side wrote (used_idx, used_elem,
//     used_flags, avail_event, avail_idx, read_desc, used_ring_bytes);
//   - convenience: add_chain / add_indirect_chain lay out a well-formed chain
//     from readable then writable buffers and make it available; add_used
//     and read_chain play a well-behaved device for driver tests;
//   - factories for the queue under test: make_device / create_device and
//     make_driver / create_driver.
//
// Conventions: test code, so misuse of the builder itself throws
// std::logic_error (GoogleTest reports it as a failure); nothing the builder
// writes is validated — that is the point. Index fields are stored with the
// same release/relaxed atomics as the real ring code (barrier.h), so the
// builder can also stand in for a driver on another thread.
//
// A builder owns the memory a queue points into: it is neither copyable nor
// movable, and must outlive every queue made from it.
#pragma once

#include <sys/uio.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/barrier.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/ring_error.h"
#include "pvnet/ring/ring_idx.h"
#include "pvnet/ring/shm.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::ring::test {

/// A descriptor in host byte order, for writing raw (possibly invalid)
/// values: `{addr, len, flags, next}`.
struct RawDesc {
    uint64_t addr = 0;
    uint32_t len = 0;
    uint16_t flags = 0;
    uint16_t next = 0;
    bool operator==(const RawDesc&) const = default;
};

/// A used ring element in host byte order. `id` is the full 32-bit wire
/// field, so a hostile device can write ids >= 2^16.
struct RawUsed {
    uint32_t id = 0;
    uint32_t len = 0;
    bool operator==(const RawUsed&) const = default;
};

/// Negotiated ring features for the queue factories.
struct QueueFeatures {
    bool event_idx = false;        ///< VIRTIO_RING_F_EVENT_IDX
    bool indirect = false;         ///< VIRTIO_RING_F_INDIRECT_DESC
    bool notify_on_empty = false;  ///< VIRTIO_F_NOTIFY_ON_EMPTY (device only)
    bool in_order = false;         ///< VIRTIO_F_IN_ORDER (device only)

    /// As the device's feature word (DeviceQueueConfig::features).
    uint64_t word() const noexcept {
        return (event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0) |
               (indirect ? virtio::feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC) : 0) |
               (notify_on_empty ? virtio::feature_mask(virtio::VIRTIO_F_NOTIFY_ON_EMPTY) : 0) |
               (in_order ? virtio::feature_mask(virtio::VIRTIO_F_IN_ORDER) : 0);
    }
};

/// Whether add_chain makes the chain visible (stores avail.idx) at once.
enum class Publish : uint8_t { Yes, No };

class RingBuilder {
public:
    static constexpr uint64_t kDefaultBase = 0x10000;
    static constexpr std::size_t kDefaultMemBytes = std::size_t{4} << 20;
    static constexpr uint64_t kPage = 4096;

    struct Options {
        mem::GuestAddr base{kDefaultBase};         ///< guest address of the main region
        std::size_t mem_bytes = kDefaultMemBytes;  ///< main region size (ring + data)
    };

    explicit RingBuilder(uint16_t size) : RingBuilder(size, Options{}) {}

    /// Lays out a ring of `size` (any value, even an invalid one: the
    /// addresses are computed all the same) at `opt.base`.
    RingBuilder(uint16_t size, Options opt) : size_(size), base_(opt.base) {
        if (opt.base.value % 16 != 0) throw std::logic_error("RingBuilder: base not 16-aligned");
        if (split_ring_bytes(size) > opt.mem_bytes) {
            throw std::logic_error("RingBuilder: memory too small for the ring");
        }
        add_region(opt.base, opt.mem_bytes, mem::Access::ReadWrite);
        addrs_ = split_ring_addrs_at(opt.base, size);
        data_start_ = round_up(opt.base.value + split_ring_bytes(size), kPage);
        bump_ = data_start_;
        main_end_ = opt.base.value + regions_.front().region.size();
    }

    RingBuilder(const RingBuilder&) = delete;
    RingBuilder& operator=(const RingBuilder&) = delete;
    RingBuilder(RingBuilder&&) = delete;
    RingBuilder& operator=(RingBuilder&&) = delete;

    // ---- memory ---------------------------------------------------------

    mem::MemoryTable& table() noexcept { return table_; }
    const mem::MemoryTable& table() const noexcept { return table_; }

    uint16_t size() const noexcept { return size_; }
    /// Guest address of the main region (and of the descriptor table).
    mem::GuestAddr base() const noexcept { return base_; }
    /// One past the last guest byte of the main region.
    mem::GuestAddr main_end() const noexcept { return mem::GuestAddr(main_end_); }
    /// Where the data area (bump allocator) starts.
    mem::GuestAddr data_start() const noexcept { return mem::GuestAddr(data_start_); }
    /// The ring's guest addresses, as the driver would program them.
    const SplitRingAddrs& addrs() const noexcept { return addrs_; }

    /// Creates a fresh memfd region of `bytes` (rounded up to a page) and
    /// adds it to the table at `gpa` with `access`. Returns its size.
    /// A huge region costs only address space: memfd pages are allocated
    /// on first touch, and translate() touches nothing.
    std::size_t add_region(mem::GuestAddr gpa, std::size_t bytes,
                           mem::Access access = mem::Access::ReadWrite) {
        auto r = mem::MemoryRegion::create(bytes, "ring_builder");
        if (!r) throw std::logic_error("RingBuilder: MemoryRegion::create failed");
        regions_.push_back(Owned{std::move(r.value()), gpa});
        const Owned& o = regions_.back();
        if (!table_.add(gpa, o.region.bytes(), access)) {
            regions_.pop_back();
            throw std::logic_error("RingBuilder: MemoryTable::add failed");
        }
        return o.region.size();
    }

    /// Host address of [gpa, gpa + len) inside one builder-owned region.
    /// The test's own view of guest memory; throws if the range is not
    /// wholly inside one region (a builder misuse, not a ring error).
    std::byte* host(mem::GuestAddr gpa, std::size_t len = 1) const {
        for (const Owned& o : regions_) {
            const uint64_t start = o.gpa.value;
            const uint64_t sz = o.region.size();
            if (gpa.value >= start && gpa.value - start <= sz && len <= sz - (gpa.value - start)) {
                return o.region.host() + (gpa.value - start);
            }
        }
        throw std::logic_error("RingBuilder::host: range outside builder memory");
    }

    /// Bump-allocates `bytes` of the data area at `align` (a power of two).
    /// Contents are whatever was there (zero unless written).
    mem::GuestAddr alloc(std::size_t bytes, std::size_t align = 16) {
        const uint64_t at = round_up(bump_, align);
        if (at > main_end_ || bytes > main_end_ - at) {
            throw std::logic_error("RingBuilder::alloc: data area exhausted");
        }
        bump_ = at + bytes;
        return mem::GuestAddr(at);
    }

    /// Allocates a buffer of `len` bytes and fills it with a pattern derived
    /// from `seed`, so a test can recognise its bytes through a host iovec.
    Buf alloc_buf(uint32_t len, uint8_t seed = 0) {
        const mem::GuestAddr gpa = alloc(len == 0 ? 1 : len, 16);
        fill_pattern(gpa, len, seed);
        return Buf{gpa, len};
    }

    /// Writes the alloc_buf pattern for `seed` over [gpa, gpa + len).
    void fill_pattern(mem::GuestAddr gpa, std::size_t len, uint8_t seed) {
        if (len == 0) return;
        std::byte* p = host(gpa, len);
        for (std::size_t i = 0; i < len; ++i) p[i] = pattern_byte(seed, i);
    }
    static std::byte pattern_byte(uint8_t seed, std::size_t i) noexcept {
        return static_cast<std::byte>((seed * 31u + i * 7u + 1u) & 0xffu);
    }

    // ---- raw driver-side writers (hostile-capable) ------------------------

    /// Writes descriptor `i` of the ring's table. `i` may be >= size: the
    /// write then lands wherever the guest address points (builder memory
    /// only).
    void write_desc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
        write_desc_at(addrs_.desc + 16u * uint64_t{i}, RawDesc{addr, len, flags, next});
    }
    void write_desc(uint16_t i, const RawDesc& d) { write_desc(i, d.addr, d.len, d.flags, d.next); }

    RawDesc read_desc(uint16_t i) const { return read_desc_at(addrs_.desc + 16u * uint64_t{i}); }

    /// Writes `descs` as a descriptor table at `gpa` (an indirect table).
    void write_indirect_table(mem::GuestAddr gpa, std::span<const RawDesc> descs) {
        for (std::size_t k = 0; k < descs.size(); ++k) write_desc_at(gpa + 16u * k, descs[k]);
    }
    void write_indirect_table(mem::GuestAddr gpa, std::initializer_list<RawDesc> descs) {
        write_indirect_table(gpa, std::span<const RawDesc>(descs.begin(), descs.size()));
    }
    /// Allocates room for `descs` in the data area and writes them there.
    mem::GuestAddr alloc_indirect_table(std::span<const RawDesc> descs) {
        const mem::GuestAddr gpa = alloc(16u * (descs.empty() ? 1 : descs.size()), 16);
        write_indirect_table(gpa, descs);
        return gpa;
    }
    mem::GuestAddr alloc_indirect_table(std::initializer_list<RawDesc> descs) {
        return alloc_indirect_table(std::span<const RawDesc>(descs.begin(), descs.size()));
    }

    /// avail.ring[slot] = head (slot taken modulo nothing: raw).
    void set_avail_slot(uint16_t slot, uint16_t head) {
        write_shared(host(addrs_.avail + virtio::SplitRingLayout::avail_ring_off(slot), 2),
                     virtio::host_to_le(head));
    }
    uint16_t avail_slot(uint16_t slot) const {
        return virtio::le_to_host(read_once<uint16_t>(
            host(addrs_.avail + virtio::SplitRingLayout::avail_ring_off(slot), 2)));
    }
    /// Release-stores avail.idx = v. Raw: the add_chain cursor is not moved
    /// (use set_next_avail for that).
    void set_avail_idx(uint16_t v) { publish_idx(avail_idx_ptr(), RingIdx(v)); }
    uint16_t avail_idx() const { return observe_idx(avail_idx_ptr()).value(); }
    void set_avail_flags(uint16_t v) { store_event(field16(addrs_.avail, 0), v); }
    uint16_t avail_flags() const { return load_event(field16(addrs_.avail, 0)); }
    void set_used_event(uint16_t v) {
        store_event(field16(addrs_.avail, virtio::SplitRingLayout::used_event_off(size_)), v);
    }
    uint16_t used_event() const {
        return load_event(field16(addrs_.avail, virtio::SplitRingLayout::used_event_off(size_)));
    }

    // ---- raw device-side fields (read by device tests, written by driver tests)

    uint16_t used_idx() const { return observe_idx(used_idx_ptr()).value(); }
    void set_used_idx(uint16_t v) { publish_idx(used_idx_ptr(), RingIdx(v)); }
    uint16_t used_flags() const { return load_event(field16(addrs_.used, 0)); }
    void set_used_flags(uint16_t v) { store_event(field16(addrs_.used, 0), v); }
    uint16_t avail_event() const {
        return load_event(field16(addrs_.used, virtio::SplitRingLayout::avail_event_off(size_)));
    }
    void set_avail_event(uint16_t v) {
        store_event(field16(addrs_.used, virtio::SplitRingLayout::avail_event_off(size_)), v);
    }
    /// used.ring[slot], raw.
    RawUsed used_elem(uint16_t slot) const {
        const auto e = read_once<virtio::virtq_used_elem>(
            host(addrs_.used + virtio::SplitRingLayout::used_ring_off(slot), 8));
        return RawUsed{e.id.get(), e.len.get()};
    }
    void set_used_elem(uint16_t slot, uint32_t id, uint32_t len) {
        virtio::virtq_used_elem e{};
        e.id.set(id);
        e.len.set(len);
        write_shared(host(addrs_.used + virtio::SplitRingLayout::used_ring_off(slot), 8), e);
    }
    /// A copy of the whole used ring (flags, idx, ring, avail_event), to check
    /// that a broken queue wrote nothing.
    std::vector<std::byte> used_ring_bytes() const {
        const std::size_t n = virtio::SplitRingLayout::used_bytes(size_);
        const std::byte* p = host(addrs_.used, n);
        return std::vector<std::byte>(p, p + n);
    }

    /// Acting as a well-behaved device (for driver tests): writes
    /// used.ring[next_used % size] = {id, len}, advances the used cursor and
    /// (by default) release-stores used.idx = cursor.
    void add_used(uint32_t id, uint32_t len, Publish publish = Publish::Yes) {
        set_used_elem(next_used_.slot(size_), id, len);
        ++next_used_;
        if (publish == Publish::Yes) publish_used();
    }
    void publish_used() { set_used_idx(next_used_.value()); }
    RingIdx next_used() const noexcept { return next_used_; }
    void set_next_used(RingIdx v) noexcept { next_used_ = v; }

    /// The descriptors of the chain at `head`, as a device would walk it:
    /// NEXT links followed, an INDIRECT descriptor replaced by its table's
    /// chain. For checking what a driver wrote; throws on anything
    /// malformed (out-of-range next, more than size descriptors, table
    /// outside builder memory) — a driver under test must not write that.
    std::vector<RawDesc> read_chain(uint16_t head) const {
        std::vector<RawDesc> out;
        if (head >= size_) throw std::logic_error("read_chain: head out of range");
        RawDesc d = read_desc(head);
        for (;;) {
            if (out.size() >= size_) throw std::logic_error("read_chain: longer than size");
            if ((d.flags & virtio::VIRTQ_DESC_F_INDIRECT) != 0) {
                if ((d.flags & virtio::VIRTQ_DESC_F_NEXT) != 0 || d.len == 0 || d.len % 16 != 0) {
                    throw std::logic_error("read_chain: malformed indirect descriptor");
                }
                const uint32_t entries = d.len / 16;
                const mem::GuestAddr table(d.addr);
                (void)host(table, d.len);
                uint32_t i = 0;
                for (uint32_t walked = 1;; ++walked) {
                    const RawDesc e = read_desc_at(table + 16u * uint64_t{i});
                    if ((e.flags & virtio::VIRTQ_DESC_F_INDIRECT) != 0) {
                        throw std::logic_error("read_chain: nested indirect");
                    }
                    out.push_back(e);
                    if ((e.flags & virtio::VIRTQ_DESC_F_NEXT) == 0) return out;
                    if (e.next >= entries || walked >= entries) {
                        throw std::logic_error("read_chain: bad indirect next or loop");
                    }
                    i = e.next;
                }
            }
            out.push_back(d);
            if ((d.flags & virtio::VIRTQ_DESC_F_NEXT) == 0) return out;
            if (d.next >= size_) throw std::logic_error("read_chain: next out of range");
            d = read_desc(d.next);
        }
    }

    // ---- well-formed chains -----------------------------------------------

    /// Lays out a chain of direct descriptors — `readable` then `writable`
    /// buffers, linked with NEXT — at descriptors taken round-robin from the
    /// table, puts its head in the next avail slot and (by default) publishes.
    /// Returns the head. Round-robin means a test must not keep more than
    /// size() descriptors in flight; use add_chain_at to place one exactly.
    uint16_t add_chain(std::span<const Buf> readable, std::span<const Buf> writable,
                       Publish publish = Publish::Yes) {
        const std::size_t n = readable.size() + writable.size();
        if (n == 0 || n > size_) throw std::logic_error("add_chain: 1..size buffers");
        const uint16_t head = next_desc_;
        next_desc_ = static_cast<uint16_t>((next_desc_ + n) % size_);
        return add_chain_at(head, readable, writable, publish);
    }
    uint16_t add_chain(std::initializer_list<Buf> readable, std::initializer_list<Buf> writable,
                       Publish publish = Publish::Yes) {
        return add_chain(span_of(readable), span_of(writable), publish);
    }

    uint16_t add_chain_at(uint16_t head, std::initializer_list<Buf> readable,
                          std::initializer_list<Buf> writable, Publish publish = Publish::Yes) {
        return add_chain_at(head, span_of(readable), span_of(writable), publish);
    }
    /// add_chain at descriptors head, head+1, ... (mod size).
    uint16_t add_chain_at(uint16_t head, std::span<const Buf> readable,
                          std::span<const Buf> writable, Publish publish = Publish::Yes) {
        const std::size_t n = readable.size() + writable.size();
        if (n == 0 || n > size_ || head >= size_) throw std::logic_error("add_chain_at: bad args");
        uint16_t i = head;
        for (std::size_t k = 0; k < n; ++k) {
            const uint16_t next = static_cast<uint16_t>((i + 1u) % size_);
            const Buf& b = k < readable.size() ? readable[k] : writable[k - readable.size()];
            uint16_t flags = k < readable.size() ? 0 : virtio::VIRTQ_DESC_F_WRITE;
            if (k + 1 < n) flags |= virtio::VIRTQ_DESC_F_NEXT;
            write_desc(i, b.gpa.value, b.len, flags, k + 1 < n ? next : uint16_t{0});
            i = next;
        }
        make_available(head, publish);
        return head;
    }

    /// Like add_chain, but the buffers go into a freshly allocated indirect
    /// table and the ring gets one INDIRECT descriptor pointing at it.
    uint16_t add_indirect_chain(std::span<const Buf> readable, std::span<const Buf> writable,
                                Publish publish = Publish::Yes) {
        if (size_ == 0) throw std::logic_error("add_indirect_chain: size 0 ring");
        const uint16_t head = next_desc_;
        next_desc_ = static_cast<uint16_t>((next_desc_ + 1u) % size_);
        return add_indirect_chain_at(head, readable, writable, publish);
    }
    uint16_t add_indirect_chain(std::initializer_list<Buf> readable,
                                std::initializer_list<Buf> writable,
                                Publish publish = Publish::Yes) {
        return add_indirect_chain(span_of(readable), span_of(writable), publish);
    }
    uint16_t add_indirect_chain_at(uint16_t head, std::initializer_list<Buf> readable,
                                   std::initializer_list<Buf> writable,
                                   Publish publish = Publish::Yes) {
        return add_indirect_chain_at(head, span_of(readable), span_of(writable), publish);
    }
    uint16_t add_indirect_chain_at(uint16_t head, std::span<const Buf> readable,
                                   std::span<const Buf> writable, Publish publish = Publish::Yes) {
        const std::size_t n = readable.size() + writable.size();
        if (n == 0 || head >= size_) throw std::logic_error("add_indirect_chain_at: bad args");
        std::vector<RawDesc> t(n);
        for (std::size_t k = 0; k < n; ++k) {
            const Buf& b = k < readable.size() ? readable[k] : writable[k - readable.size()];
            uint16_t flags = k < readable.size() ? 0 : virtio::VIRTQ_DESC_F_WRITE;
            if (k + 1 < n) flags |= virtio::VIRTQ_DESC_F_NEXT;
            t[k] = RawDesc{b.gpa.value, b.len, flags, static_cast<uint16_t>(k + 1 < n ? k + 1 : 0)};
        }
        const mem::GuestAddr table = alloc_indirect_table(t);
        write_desc(head, table.value, static_cast<uint32_t>(16u * n), virtio::VIRTQ_DESC_F_INDIRECT,
                   0);
        make_available(head, publish);
        return head;
    }

    /// Puts `head` in avail.ring[next_avail % size] and advances the cursor;
    /// publishes (avail.idx = cursor) unless told not to.
    void make_available(uint16_t head, Publish publish = Publish::Yes) {
        set_avail_slot(next_avail_.slot(size_), head);
        ++next_avail_;
        if (publish == Publish::Yes) this->publish();
    }
    /// Release-stores avail.idx = the add_chain cursor.
    void publish() { set_avail_idx(next_avail_.value()); }

    /// The avail index the next add_chain will use.
    RingIdx next_avail() const noexcept { return next_avail_; }
    /// Moves the add_chain cursor (e.g. after a raw set_avail_idx).
    void set_next_avail(RingIdx v) noexcept { next_avail_ = v; }
    /// The descriptor the next add_chain will start at.
    uint16_t next_desc() const noexcept { return next_desc_; }
    void set_next_desc(uint16_t i) noexcept { next_desc_ = i; }

    /// Zeroes the ring (all three parts) and rewinds the cursors, as a
    /// driver re-initialising its queue after a device reset.
    void clear_ring() {
        std::memset(host(addrs_.desc, virtio::SplitRingLayout::desc_bytes(size_)), 0,
                    virtio::SplitRingLayout::desc_bytes(size_));
        std::memset(host(addrs_.avail, virtio::SplitRingLayout::avail_bytes(size_)), 0,
                    virtio::SplitRingLayout::avail_bytes(size_));
        std::memset(host(addrs_.used, virtio::SplitRingLayout::used_bytes(size_)), 0,
                    virtio::SplitRingLayout::used_bytes(size_));
        next_avail_ = RingIdx(0);
        next_used_ = RingIdx(0);
        next_desc_ = 0;
    }

    // ---- queues under test ------------------------------------------------

    /// Device config; `last_avail_idx` is the base a restarted queue resumes at.
    DeviceQueueConfig device_config(QueueFeatures f = {}, RingIdx last_avail_idx = {}) const {
        DeviceQueueConfig c;
        c.addrs = addrs_;
        c.features = f.word();
        c.last_avail_idx = last_avail_idx;
        return c;
    }
    Result<std::unique_ptr<SplitDeviceQueue>, RingError> create_device(
        QueueFeatures f = {}, RingIdx last_avail_idx = {}) const {
        return SplitDeviceQueue::create(table_, device_config(f, last_avail_idx));
    }
    /// create_device that throws if setup fails.
    std::unique_ptr<SplitDeviceQueue> make_device(QueueFeatures f = {},
                                                  RingIdx last_avail_idx = {}) const {
        auto q = create_device(f, last_avail_idx);
        if (!q) {
            throw std::logic_error("make_device: " + std::string(to_string(q.error())));
        }
        return std::move(q).value();
    }

    /// Driver config; with f.indirect, an indirect area of size *
    /// indirect_max tables is carved out of the data area.
    DriverQueueConfig driver_config(QueueFeatures f = {}, uint16_t indirect_max = 8) {
        DriverQueueConfig c;
        c.addrs = addrs_;
        c.event_idx = f.event_idx;
        c.indirect = f.indirect;
        if (f.indirect) {
            c.indirect_max = indirect_max;
            c.indirect_area = alloc(std::size_t{size_} * indirect_max * 16u, 16);
        }
        return c;
    }
    Result<std::unique_ptr<SplitDriverQueue>, RingError> create_driver(QueueFeatures f = {},
                                                                       uint16_t indirect_max = 8) {
        return SplitDriverQueue::create(table_, driver_config(f, indirect_max));
    }
    std::unique_ptr<SplitDriverQueue> make_driver(QueueFeatures f = {}, uint16_t indirect_max = 8) {
        auto q = create_driver(f, indirect_max);
        if (!q) {
            throw std::logic_error("make_driver: " + std::string(to_string(q.error())));
        }
        return std::move(q).value();
    }

private:
    struct Owned {
        mem::MemoryRegion region;
        mem::GuestAddr gpa;
    };

    static uint64_t round_up(uint64_t v, uint64_t a) noexcept { return (v + a - 1) / a * a; }
    static std::span<const Buf> span_of(std::initializer_list<Buf> l) noexcept {
        return {l.begin(), l.size()};
    }

    void write_desc_at(mem::GuestAddr gpa, const RawDesc& r) {
        virtio::virtq_desc d{};
        d.addr.set(r.addr);
        d.len.set(r.len);
        d.flags.set(r.flags);
        d.next.set(r.next);
        write_shared(host(gpa, sizeof d), d);
    }
    RawDesc read_desc_at(mem::GuestAddr gpa) const {
        const auto d = read_once<virtio::virtq_desc>(host(gpa, sizeof(virtio::virtq_desc)));
        return RawDesc{d.addr.get(), d.len.get(), d.flags.get(), d.next.get()};
    }
    uint16_t* field16(mem::GuestAddr part, std::size_t off) const {
        std::byte* p = host(part + off, 2);
        // atomic_ref needs natural alignment; a raw test layout may lack it.
        if (std::bit_cast<std::uintptr_t>(p) % 2 != 0) {
            throw std::logic_error("RingBuilder: ring field not 2-byte aligned");
        }
        return virtio::field_at<uint16_t>(p, 0);
    }
    uint16_t* avail_idx_ptr() const {
        return field16(addrs_.avail, virtio::SplitRingLayout::avail_idx_off());
    }
    uint16_t* used_idx_ptr() const {
        return field16(addrs_.used, virtio::SplitRingLayout::used_idx_off());
    }

    uint16_t size_;
    mem::GuestAddr base_;
    SplitRingAddrs addrs_;
    // Regions before the table: the table holds pointers into them.
    std::vector<Owned> regions_;
    mem::MemoryTable table_;
    uint64_t data_start_ = 0;
    uint64_t bump_ = 0;
    uint64_t main_end_ = 0;
    RingIdx next_avail_;
    RingIdx next_used_;
    uint16_t next_desc_ = 0;
};

}  // namespace pvnet::ring::test
