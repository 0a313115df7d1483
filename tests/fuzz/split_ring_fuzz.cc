// Fuzz target: SplitDeviceQueue against a hostile driver (STYLE.md §6 and §11
// "Fuzz"; the structure-decoding approach of rust-vmm/vm-virtio
// fuzz/fuzz_targets/virtio_queue.rs).
//
// Input, read front to back (missing bytes read as zero):
//   header      size exponent (1..256), features (EVENT_IDX, INDIRECT_DESC,
//               NOTIFY_ON_EMPTY, setup variant: valid, or bad size, alignment
//               or placement; bit 6: a restarted ring), default descriptor
//               style, [restarted: the base (last_avail_idx), near the 16-bit
//               wrap (65536 - k) or anywhere, and used.idx, up to 255 behind
//               it or anywhere], avail.idx (base + 0..255), used_event,
//               avail.flags
//   ring image  descriptor pokes over a default table, indirect tables in the
//               data area (optionally linked from the main table), avail slots
//   op list     pop, add_used, flush_used, push_used(_batch), unpop,
//               should_signal, enable/disable_notify, pending, reset, a
//               well-behaved driver refilling, whole pop/use/signal rounds,
//               and the driver racing the device: re-poking avail.idx,
//               descriptors, slots, event words and indirect entries between
//               calls; restarted rings also stop and start again at the base
//               the queue reports (GET_VRING_BASE / SET_VRING_BASE)
//
// Guest memory: region A (ring, indirect tables, data), sixteen adjacent
// one-page regions B0..B15 right after it (a buffer crossing them maps to many
// pieces), a read-only region C behind a gap; each is a guarded memfd.
//
// Every call is checked against a reference model of the queue that walks the
// chain by the rules of STYLE.md §6 and translates with a brute-force region
// scan: same status, same iovecs, same used entries, same signal decisions.
// Independently of the model: every popped iovec lies inside a region with the
// access its direction needs and is touched; byte counts equal iovec sums;
// a broken queue stays broken until reset(); create writes no ring memory.
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::fuzz {
namespace {

using mem::Access;
using mem::GuestAddr;
using ring::DescChain;
using ring::kMaxIov;
using ring::PopStatus;
using ring::RingError;
using ring::SplitDeviceQueue;
using virtio::virtq_desc;
using virtio::virtq_used_elem;
using virtio::VIRTQ_DESC_F_INDIRECT;
using virtio::VIRTQ_DESC_F_NEXT;
using virtio::VIRTQ_DESC_F_WRITE;

// Guest-physical layout: the ring image at the start of region A
// (fuzz_support.h), then:
constexpr uint64_t kTablesGpa = 0x12000;  // 4 indirect tables of up to 256 entries
constexpr uint32_t kTables = 4;
constexpr uint64_t kDataGpa = 0x16000;    // buffers up to the end of A
constexpr uint64_t kBGpa = 0x20000;       // B0..B15, one page each, adjacent to A
constexpr std::size_t kBPages = 16;
constexpr uint64_t kCGpa = 0x40000;       // read-only, after an unmapped gap
constexpr std::size_t kCBytes = 0x4000;
constexpr std::size_t kImageBytes = 0xC000;  // ring + tables + default buffers, cleared per input
constexpr std::size_t kMaxOps = 256;
constexpr std::size_t kWorkBudget = 1u << 14;  // pops + iovecs per input: bounds one run

/// Regions A, B0..B15 and C, made once per process.
GuestMemory& guest() {
    static GuestMemory* g = [] {
        auto* n = new GuestMemory;
        n->add(kAGpa, kABytes, Access::ReadWrite, "fuzz-ring");
        for (std::size_t i = 0; i < kBPages; ++i) {
            n->add(kBGpa + 0x1000 * i, 0x1000, Access::ReadWrite, "fuzz-ring");
        }
        n->add(kCGpa, kCBytes, Access::Read, "fuzz-ring");
        return n;
    }();
    return *g;
}

void put_desc(uint64_t table_gpa, uint32_t i, const virtq_desc& d) {
    std::memcpy(guest().at(table_gpa + 16u * i), &d, sizeof d);
}
virtq_desc get_desc(const std::byte* table_host, uint32_t i) {
    virtq_desc d;
    std::memcpy(&d, table_host + 16u * i, sizeof d);
    return d;
}

/// A descriptor from the input, its address biased towards region edges.
virtq_desc decode_desc(Reader& r, uint64_t ring_gpa) {
    uint64_t addr = 0;
    switch (r.u8() % 10) {
        case 0:
        case 1: addr = kDataGpa + r.u16() % (kBGpa - kDataGpa); break;
        case 2: addr = kBGpa - 1 - r.u8(); break;  // crosses A -> B0 -> ...
        case 3: addr = kBGpa + r.u16() % (0x1000 * kBPages); break;
        case 4: addr = kCGpa + r.u16() % kCBytes; break;  // read-only
        case 5: {  // just before a hole: below A, after B15, after C
            static constexpr std::array<uint64_t, 3> ends{kAGpa, kBGpa + 0x1000 * kBPages,
                                                          kCGpa + kCBytes};
            const uint8_t which = r.u8();
            addr = ends[which % 3] - 1 - r.u8() + (which >= 0x80 ? 0x100u : 0u);
            break;
        }
        case 6: addr = kTablesGpa + 0x1000u * (r.u8() % kTables) + (r.u8() & 0x8u); break;
        case 7: addr = ring_gpa + r.u16() % 0x2000u; break;  // aliases the ring itself
        case 8: addr = UINT64_MAX - r.u16(); break;
        default: addr = r.u64(); break;
    }
    uint32_t len = 0;
    switch (r.u8() % 6) {
        case 0: len = 0; break;
        case 1: len = 1u + r.u8() % 64u; break;
        case 2: len = r.u16(); break;
        case 3: len = r.u32(); break;
        case 4: len = 16u * r.u8(); break;  // indirect table lengths
        default: len = UINT32_MAX - r.u8(); break;
    }
    const uint8_t f = r.u8();
    // Low bits NEXT/WRITE/INDIRECT; a set top bit adds a flag no spec defines.
    const auto flags = static_cast<uint16_t>((f & 7u) | ((f & 0x80u) != 0 ? 0x8000u : 0u));
    uint16_t next = r.u8();
    if (next == 0xFF) next = r.u16();
    return make_desc(addr, len, flags, next);
}

// ---------------------------------------------------------------------------
// Reference model of the device queue.

struct Popped {
    uint16_t head;
    bool outstanding;  // popped and neither used nor given back
};

struct RefChain {
    std::array<iovec, kMaxIov> iov{};
    std::size_t n = 0;
    uint16_t out_num = 0;
    uint16_t in_num = 0;
    uint64_t out_bytes = 0;
    uint64_t in_bytes = 0;
};

constexpr RingError kOk = RingError::Count;

/// Brute-force translation: appends the pieces of [gpa, gpa+len) to `c`, or
/// says why it cannot (len > 0 here).
RingError ref_translate(uint64_t gpa, uint32_t len, Access access, RefChain& c) {
    if (len - 1u > UINT64_MAX - gpa) return RingError::AddrOverflow;
    switch (model_pieces(guest().regions(), gpa, len, access, c.iov, c.n)) {
        case ModelFault::None: return kOk;
        case ModelFault::Unmapped: return RingError::AddrUnmapped;
        case ModelFault::AccessDenied: return RingError::AddrAccessDenied;
        case ModelFault::TooManyPieces: return RingError::TooManyIovs;
    }
    fail();
}

/// Host address of a whole range inside one region, or null (the regions do
/// not overlap: the one holding `gpa` is the only candidate).
const std::byte* ref_contiguous(uint64_t gpa, uint32_t len) {
    if (len - 1u > UINT64_MAX - gpa) return nullptr;
    const ModelRegion* m = holding(guest().regions(), gpa);
    if (m == nullptr || len > m->size - (gpa - m->gpa)) return nullptr;
    return m->host + (gpa - m->gpa);
}

struct Model {
    uint16_t size = 1;
    bool event_idx = false;
    bool indirect = false;
    bool notify_on_empty = false;
    uint16_t last_avail = 0;
    uint16_t shadow_avail = 0;
    uint16_t used = 0;
    uint16_t staged = 0;
    bool signalled_valid = false;
    uint16_t signalled = 0;
    bool broken = false;
    RingError reason = kOk;  ///< first error since the last reset
    std::array<bool, kMaxSize> inflight{};
    std::array<uint32_t, kMaxSize> in_bytes{};
    std::vector<Popped> popped;                 ///< in pop order
    std::array<std::size_t, kMaxSize> popped_at{};  ///< where an in-flight head sits in it

    uint16_t mask() const { return u16_of(size - 1u); }
    uint16_t avail_idx() const { return guest().load<uint16_t>(kAvailGpa + 2); }
    uint16_t used_event() const { return guest().load<uint16_t>(kAvailGpa + 4u + 2u * size); }
    uint16_t avail_flags() const { return guest().load<uint16_t>(kAvailGpa); }

    void reset() {
        last_avail = shadow_avail = used = staged = 0;
        signalled_valid = false;
        signalled = 0;
        broken = false;
        reason = kOk;
        inflight.fill(false);
        popped.clear();
    }

    /// The queue breaks; the first reason sticks.
    void breaks(RingError e) {
        if (!broken) reason = e;
        broken = true;
    }

    /// Reads avail.idx as the device must; false (broken) on a jump past size.
    bool observe() {
        const uint16_t a = avail_idx();
        if (u16_of(a - last_avail) > size) {
            breaks(RingError::AvailIdxJump);
            return false;
        }
        shadow_avail = a;
        return true;
    }

    void popped_ok(uint16_t head, uint32_t chain_in_bytes) {
        inflight[head] = true;
        in_bytes[head] = chain_in_bytes;
        popped_at[head] = popped.size();
        popped.push_back(Popped{head, true});
        ++last_avail;
    }

    void used_ok(uint16_t id) {
        inflight[id] = false;
        popped[popped_at[id]].outstanding = false;
        ++staged;
    }

    /// One publish: used.idx moves by `staged`; a signal record it reached
    /// or passed is 2^16 stale and forgotten (vhost_add_used_n).
    void publish_staged() {
        used = u16_of(used + staged);
        if (u16_of(used - signalled) < staged) signalled_valid = false;
        staged = 0;
    }

    /// A new queue at the old one's base: last_avail kept, used.idx as the
    /// ring holds it (the last publish; not `used` after a reset, which
    /// zeroes the queue's count but leaves the ring alone), the rest fresh.
    void restarted(uint16_t ring_used_idx) {
        const uint16_t base = last_avail;
        reset();
        last_avail = shadow_avail = base;
        used = ring_used_idx;
    }

    /// Walks a chain by the rules of STYLE.md §6, checked in the order the
    /// device checks them (the first broken rule names the error).
    RingError walk(uint16_t head, RefChain& c) const {
        const std::byte* table = guest().at(kDescGpa);
        uint32_t table_len = size;
        bool in_table = false;
        uint32_t idx = head;
        uint32_t count = 0;
        uint64_t total = 0;
        for (;;) {
            const virtq_desc d = get_desc(table, idx);
            const uint16_t flags = d.flags.get();
            const uint32_t len = d.len.get();
            if (flags & VIRTQ_DESC_F_INDIRECT) {
                if (!indirect) return RingError::IndirectNotNegotiated;
                if (in_table) return RingError::NestedIndirect;
                if ((flags & VIRTQ_DESC_F_NEXT) != 0) return RingError::IndirectWithNext;
                if (len == 0 || len % 16 != 0 || len / 16 > size) return RingError::IndirectBadLen;
                if (len - 1u > UINT64_MAX - d.addr.get()) return RingError::AddrOverflow;
                table = ref_contiguous(d.addr.get(), len);
                if (table == nullptr) return RingError::IndirectUnmapped;
                table_len = len / 16;
                in_table = true;
                idx = 0;
                continue;
            }
            if (++count > size) return RingError::ChainTooLong;
            const bool writable = (flags & VIRTQ_DESC_F_WRITE) != 0;
            if (len == 0) return RingError::ZeroLength;
            if (!writable && c.in_num != 0) return RingError::ReadableAfterWritable;
            total += len;
            if (total > UINT32_MAX) return RingError::ChainOver4GiB;
            const std::size_t before = c.n;
            const RingError e =
                ref_translate(d.addr.get(), len, writable ? Access::Write : Access::Read, c);
            if (e != kOk) return e;
            const auto pieces = static_cast<uint16_t>(c.n - before);
            if (writable) {
                c.in_num = u16_of(c.in_num + pieces);
                c.in_bytes += len;
            } else {
                c.out_num = u16_of(c.out_num + pieces);
                c.out_bytes += len;
            }
            if (!(flags & VIRTQ_DESC_F_NEXT)) return kOk;
            if (d.next.get() >= table_len) return RingError::NextOutOfRange;
            idx = d.next.get();
        }
    }
};

/// The ring's bytes (desc, avail and used parts at the largest size), to
/// check that creating a queue writes none of them: a restarted ring keeps
/// what the driver and the last device left there.
struct RingImage {
    std::array<std::byte, kUsedGpa + 6u + 8u * kMaxSize - kDescGpa> bytes;

    static RingImage take() {
        RingImage i;
        std::memcpy(i.bytes.data(), guest().at(kDescGpa), i.bytes.size());
        return i;
    }
    bool operator==(const RingImage&) const = default;
};

// ---------------------------------------------------------------------------
// The harness: one queue, the model, and the ops.

struct Harness {
    Model m;
    std::unique_ptr<SplitDeviceQueue> q;
    pvnet::ring::DeviceQueueConfig cfg;
    bool restarts = false;  ///< the restart op is in the op list
    std::size_t work = 0;
    uint16_t refill_cursor = 0;

    static DescChain& chain() {
        static DescChain c;  // 16 KiB of iovecs: not on the stack
        return c;
    }

    bool pop_class(RingError e) const {
        return e >= RingError::AvailIdxJump && e <= RingError::TooManyIovs;
    }

    void check_state() const {
        check(q->broken() == m.broken);
        check(q->last_avail_idx().value() == m.last_avail);
        check(q->used_idx().value() == m.used);
        if (m.broken) check(q->broken_reason() == m.reason && pop_class(m.reason));
    }

    /// Each iovec of a successful pop: inside one region with the access its
    /// direction needs, non-empty; then touched (read, and written back if
    /// writable), so an escape faults on a guard page.
    static void check_iov(const iovec& v, Access access) {
        check(v.iov_len > 0);
        bool inside = false;
        for (const ModelRegion& r : guest().regions()) {
            const auto* p = static_cast<const std::byte*>(v.iov_base);
            if (p >= r.host && p < r.host + r.size) {
                inside = v.iov_len <= r.size - static_cast<std::size_t>(p - r.host) &&
                         pvnet::mem::allows(r.access, access);
                break;
            }
        }
        check(inside);
        touch(v, access);
    }

    PopStatus pop() {
        ++work;
        // Expected outcome first: pop only reads ring memory.
        PopStatus want = PopStatus::Ok;
        static RefChain ref;
        ref = RefChain{};
        uint16_t head = 0;
        if (m.broken) {
            want = PopStatus::Broken;
        } else if (m.last_avail == m.shadow_avail && !m.observe()) {
            want = PopStatus::Broken;
        } else if (m.last_avail == m.shadow_avail) {
            want = PopStatus::Empty;
        } else {
            const uint16_t slot = m.last_avail & m.mask();
            head = guest().load<uint16_t>(kAvailGpa + 4u + 2u * slot);
            RingError e = kOk;
            if (head >= m.size) {
                e = RingError::HeadOutOfRange;
            } else if (m.inflight[head]) {
                e = RingError::HeadInflight;
            } else {
                e = m.walk(head, ref);
            }
            if (e != kOk) {
                want = PopStatus::Broken;
                m.breaks(e);
            }
        }

        DescChain& c = chain();
        const PopStatus got = q->pop(c);
        check(got == want);
        if (got != PopStatus::Ok) return got;

        check(c.head == head && c.head < m.size);
        check(std::size_t{c.out_num} + c.in_num <= kMaxIov);
        work += std::size_t{c.out_num} + c.in_num;
        check(c.out_num == ref.out_num && c.in_num == ref.in_num);
        check(c.out_bytes == ref.out_bytes && c.in_bytes == ref.in_bytes);
        uint64_t out_sum = 0;
        uint64_t in_sum = 0;
        for (std::size_t i = 0; i < ref.n; ++i) {
            check(c.iov[i].iov_base == ref.iov[i].iov_base &&
                  c.iov[i].iov_len == ref.iov[i].iov_len);
        }
        for (const iovec& v : c.readable()) {
            check_iov(v, Access::Read);
            out_sum += v.iov_len;
        }
        for (const iovec& v : c.writable()) {
            check_iov(v, Access::Write);
            in_sum += v.iov_len;
        }
        check(out_sum == c.out_bytes && in_sum == c.in_bytes);

        m.popped_ok(head, c.in_bytes);
        return got;
    }

    /// add_used, or push_used (add_used + flush_used) when `push`.
    void add_used(uint16_t id, uint32_t len, bool push = false) {
        bool ok = true;
        RingError err = RingError::Count;
        bool staged = false;
        if (m.broken) {
            // A broken queue ignores pushes.
        } else if (id >= m.size || !m.inflight[id]) {
            ok = false;
            err = RingError::PushIdNotInflight;
        } else if (len > m.in_bytes[id]) {
            ok = false;
            err = RingError::PushLenTooLong;
        } else {
            staged = true;
        }
        const uint16_t slot = u16_of(m.used + m.staged) & m.mask();
        auto s = push ? q->push_used(id, len) : q->add_used(id, len);
        check(s.has_value() == ok);
        if (!ok) check(s.error() == err);
        if (staged) {
            m.used_ok(id);
            virtq_used_elem e;
            std::memcpy(&e, guest().at(kUsedGpa + 4u + 8u * slot), sizeof e);
            check(e.id.get() == id && e.len.get() == len);
        }
        if (push) flushed();
    }

    void flush_used() {
        q->flush_used();
        flushed();
    }

    /// The model's side of flush_used: one publish of everything staged.
    void flushed() {
        if (m.staged == 0 || m.broken) return;
        m.publish_staged();
        check(guest().load<uint16_t>(kUsedGpa + 2) == m.used);
    }

    std::vector<uint16_t> outstanding() const {
        std::vector<uint16_t> v;
        for (uint16_t id = 0; id < m.size; ++id) {
            if (m.inflight[id]) v.push_back(id);
        }
        return v;
    }

    uint32_t decode_len(Reader& r, uint16_t id) const {
        const uint32_t have = id < m.size ? m.in_bytes[id] : 0;
        switch (r.u8() % 5) {
            case 0: return 0;
            case 1: return have;
            case 2: return have == UINT32_MAX ? have : have + 1;
            case 3: return r.u32();
            default: return static_cast<uint32_t>(r.u32() % (uint64_t{have} + 1));
        }
    }

    void push_batch(Reader& r) {
        std::vector<pvnet::ring::UsedElem> elems;
        const uint8_t sel = r.u8();
        for (uint16_t id : outstanding()) {
            elems.push_back({id, (sel & 1) != 0 ? m.in_bytes[id] : 0});
        }
        if ((sel & 2) != 0 && !elems.empty()) {
            // One bad entry in the middle: the batch stops there.
            const uint16_t bad = r.u8();
            elems.insert(elems.begin() + static_cast<std::ptrdiff_t>(elems.size() / 2),
                         {bad, r.u32()});
        }
        if ((sel & 4) != 0) std::reverse(elems.begin(), elems.end());
        // The model: add one by one, stop at the first failure, then flush.
        const uint16_t staged_before = m.staged;
        bool ok = true;
        RingError err = RingError::Count;
        for (const auto& e : elems) {
            if (m.broken) continue;
            if (e.id >= m.size || !m.inflight[e.id]) {
                ok = false;
                err = RingError::PushIdNotInflight;
                break;
            }
            if (e.len > m.in_bytes[e.id]) {
                ok = false;
                err = RingError::PushLenTooLong;
                break;
            }
            m.used_ok(e.id);
        }
        auto s = q->push_used_batch(elems);
        check(s.has_value() == ok);
        if (!ok) check(s.error() == err);
        // Used elements written in order from the old position.
        const uint32_t n = u16_of(m.staged - staged_before);
        for (uint32_t i = 0; i < n; ++i) {
            const uint16_t slot = u16_of(m.used + staged_before + i) & m.mask();
            virtq_used_elem e;
            std::memcpy(&e, guest().at(kUsedGpa + 4u + 8u * slot), sizeof e);
            check(e.id.get() == elems[i].id && e.len.get() == elems[i].len);
        }
        if (m.staged != 0 && !m.broken) {
            m.publish_staged();
            check(guest().load<uint16_t>(kUsedGpa + 2) == m.used);
        }
    }

    void unpop(Reader& r) {
        // Only chains still outstanding at the top of the pop order can be given back.
        std::size_t k = 0;
        while (k < m.popped.size() && m.popped[m.popped.size() - 1 - k].outstanding) ++k;
        const auto n = static_cast<uint16_t>(r.u8() % (k + 1));
        q->unpop(n);
        for (uint16_t i = 0; i < n; ++i) {
            m.inflight[m.popped.back().head] = false;
            m.popped.pop_back();
            --m.last_avail;
        }
    }

    void should_signal() {
        bool want = false;
        if (m.broken) {
            want = false;
        } else if (m.notify_on_empty && m.avail_idx() == m.last_avail) {
            want = true;
            m.signalled_valid = true;
            m.signalled = m.used;
        } else if (m.event_idx) {
            // used_event in [signalled, used): the index crossed it since the last decision.
            const uint16_t ev = m.used_event();
            want = !m.signalled_valid || u16_of(ev - m.signalled) < u16_of(m.used - m.signalled);
            m.signalled_valid = true;
            m.signalled = m.used;
        } else {
            want = (m.avail_flags() & pvnet::virtio::VIRTQ_AVAIL_F_NO_INTERRUPT) == 0;
        }
        check(q->should_signal() == want);
    }

    void enable_notify() {
        bool want = false;
        const bool was_broken = m.broken;
        if (!was_broken && m.observe()) want = m.last_avail != m.shadow_avail;
        const uint16_t old_flags = guest().load<uint16_t>(kUsedGpa);
        check(q->enable_notify() == want);
        if (was_broken) {
            check(guest().load<uint16_t>(kUsedGpa) == old_flags);
        } else if (m.event_idx) {
            check(guest().load<uint16_t>(kUsedGpa + 4u + 8u * m.size) == m.last_avail);
        } else {
            check(guest().load<uint16_t>(kUsedGpa) == 0);
        }
    }

    void disable_notify() {
        const uint16_t old_flags = guest().load<uint16_t>(kUsedGpa);
        q->disable_notify();
        const uint16_t want = !m.broken && !m.event_idx ? pvnet::virtio::VIRTQ_USED_F_NO_NOTIFY
                                                         : old_flags;
        check(guest().load<uint16_t>(kUsedGpa) == want);
    }

    void pending() {
        uint16_t want = 0;
        if (!m.broken && m.observe()) want = u16_of(m.shadow_avail - m.last_avail);
        const uint16_t got = q->pending();
        check(got == want && got <= m.size);
    }

    /// A well-behaved driver making heads not in flight available again.
    void refill(uint16_t count) {
        uint16_t avail = m.avail_idx();
        for (uint16_t i = 0; i < count; ++i) {
            uint16_t head = refill_cursor;
            for (uint16_t tries = 0; tries < m.size && m.inflight[head]; ++tries) {
                head = u16_of(head + 1u) & m.mask();
            }
            refill_cursor = u16_of(head + 1u) & m.mask();
            guest().store<uint16_t>(kAvailGpa + 4u + 2u * (avail & m.mask()), head);
            ++avail;
        }
        guest().store<uint16_t>(kAvailGpa + 2, avail);
    }

    /// Rounds of refill, pop everything, use everything, signal, re-arm.
    void cycle(Reader& r) {
        const unsigned rounds = 1u + r.u8() % 8u;
        for (unsigned i = 0; i < rounds && work < kWorkBudget; ++i) {
            refill(m.size);
            while (work < kWorkBudget && pop() == PopStatus::Ok) {
            }
            for (uint16_t id : outstanding()) add_used(id, m.in_bytes[id]);
            flush_used();
            should_signal();
            enable_notify();
            check_state();
        }
    }

    void poke_avail_idx(Reader& r) {
        uint16_t v = 0;
        switch (r.u8() % 4) {
            case 0: v = u16_of(m.avail_idx() + r.u8() % 4u); break;
            case 1: v = u16_of(m.last_avail + r.u8()); break;
            case 2: v = r.u16(); break;
            default: v = u16_of(m.last_avail + m.size + 1u); break;  // a jump
        }
        guest().store<uint16_t>(kAvailGpa + 2, v);
    }

    /// Stops the queue (its base read as GET_VRING_BASE would) and creates a
    /// new one there (SET_VRING_BASE): staged, unpublished entries and
    /// chains in flight go with the old queue; a broken queue's base is
    /// whatever it had reached. Creating writes no ring memory.
    void restart() {
        const pvnet::ring::RingIdx base = q->last_avail_idx();
        check(base.value() == m.last_avail);
        q.reset();
        cfg.last_avail_idx = base;
        const RingImage before = RingImage::take();
        q = expect_setup(SplitDeviceQueue::create(guest().table(), cfg), RingError::Count);
        check(before == RingImage::take());
        m.restarted(guest().load<uint16_t>(kUsedGpa + 2));
    }

    void run_op(Reader& r) {
        switch (r.u8() % (restarts ? 20u : 19u)) {
            case 0: pop(); break;
            case 1:
                for (uint32_t i = 0; i <= m.size && work < kWorkBudget; ++i) {
                    if (pop() != PopStatus::Ok) break;
                }
                break;
            case 2: {
                const uint8_t sel = r.u8();
                const std::vector<uint16_t> out = outstanding();
                uint16_t id = sel;
                if ((sel & 0x80) == 0 && !out.empty()) {
                    id = out[sel % out.size()];
                } else if (sel == 0xFF) {
                    id = r.u16();
                }
                add_used(id, decode_len(r, id));
                break;
            }
            case 3: flush_used(); break;
            case 4: {
                const std::vector<uint16_t> out = outstanding();
                const uint16_t id = out.empty() ? r.u8() : out[r.u8() % out.size()];
                add_used(id, decode_len(r, id), true);
                break;
            }
            case 5: push_batch(r); break;
            case 6: unpop(r); break;
            case 7: should_signal(); break;
            case 8: enable_notify(); break;
            case 9: disable_notify(); break;
            case 10: pending(); break;
            case 11: poke_avail_idx(r); break;
            case 12: {
                const uint32_t i = uint32_t{r.u8()} % m.size;
                put_desc(kDescGpa, i, decode_desc(r, kDescGpa));
                break;
            }
            case 13: {
                const uint32_t slot = uint32_t{r.u8()} % m.size;
                uint16_t v = r.u8();
                if (v == 0xFF) v = r.u16();
                guest().store<uint16_t>(kAvailGpa + 4u + 2u * slot, v);
                break;
            }
            case 14:
                guest().store<uint16_t>(kAvailGpa + 4u + 2u * m.size, r.u16());  // used_event
                guest().store<uint16_t>(kAvailGpa, r.u8() & 1u);                  // avail.flags
                break;
            case 15: {
                const uint64_t t = kTablesGpa + 0x1000u * (r.u8() % kTables);
                const uint32_t i = r.u8();
                put_desc(t, i, decode_desc(r, kDescGpa));
                break;
            }
            case 16:
                q->reset();
                m.reset();
                break;
            case 17: refill(u16_of(1u + uint32_t{r.u8()} % m.size)); break;
            case 18: cycle(r); break;
            default: restart(); break;
        }
        check_state();
    }
};

/// Default descriptor of slot `i` in a table of `n` for one of four styles:
/// single readable, single writable, readable+writable pairs, one long chain.
virtq_desc default_desc(uint8_t style, uint32_t i, uint32_t n, uint64_t data_gpa, uint32_t len) {
    const uint64_t addr = data_gpa + uint64_t{len} * i;
    const auto next = static_cast<uint16_t>(i + 1u);
    switch (style % 4) {
        case 0: return make_desc(addr, len, 0, 0);
        case 1: return make_desc(addr, len, VIRTQ_DESC_F_WRITE, 0);
        case 2:
            return i % 2 == 0 && i + 1 < n ? make_desc(addr, len, VIRTQ_DESC_F_NEXT, next)
                                           : make_desc(addr, len, VIRTQ_DESC_F_WRITE, 0);
        default: {
            const uint16_t dir = i >= n / 2 ? VIRTQ_DESC_F_WRITE : 0;
            const uint16_t more = i + 1 < n ? VIRTQ_DESC_F_NEXT : 0;
            return make_desc(addr, len, static_cast<uint16_t>(dir | more), next);
        }
    }
}

/// One input: decode it and check every call against the model.
int run_input(const uint8_t* data, std::size_t size) {
    GuestMemory& g = guest();
    Reader r(data, size);
    std::memset(g.at(kAGpa), 0, kImageBytes);

    // Header.
    const auto qsize = static_cast<uint16_t>(1u << (r.u8() % 9));
    const uint8_t features = r.u8();
    const uint8_t style = r.u8();
    using pvnet::virtio::feature_mask;
    pvnet::ring::DeviceQueueConfig cfg;
    cfg.addrs = {qsize, GuestAddr(kDescGpa), GuestAddr(kAvailGpa), GuestAddr(kUsedGpa)};
    // Bits 0-2 as the device's feature word; unrelated bits ride along and
    // must change nothing.
    cfg.features =
        ((features & 1u) != 0 ? feature_mask(pvnet::virtio::VIRTIO_RING_F_EVENT_IDX) : 0) |
        ((features & 2u) != 0 ? feature_mask(pvnet::virtio::VIRTIO_RING_F_INDIRECT_DESC) : 0) |
        ((features & 4u) != 0 ? feature_mask(pvnet::virtio::VIRTIO_F_NOTIFY_ON_EMPTY) : 0) |
        feature_mask(pvnet::virtio::VIRTIO_F_VERSION_1) |
        feature_mask(pvnet::virtio::VIRTIO_NET_F_MRG_RXBUF);
    const bool restarted = (features & 0x40u) != 0;
    // A restarted ring: the base (vhost-user SET_VRING_BASE) and the used.idx
    // the last device left, both most often just short of the 16-bit wrap.
    uint16_t base = 0;
    uint16_t used0 = 0;
    if (restarted) {
        const uint8_t sel = r.u8();
        base = (sel & 1u) != 0 ? r.u16() : u16_of(0x10000u - r.u8());
        used0 = (sel & 2u) != 0 ? r.u16() : u16_of(uint32_t{base} - r.u8());
    }
    cfg.last_avail_idx = pvnet::ring::RingIdx(base);
    const unsigned setup = (features >> 3) & 7u;
    RingError setup_error = RingError::Count;
    if (setup == 4) {
        // Not a power of two.
        cfg.addrs.size = qsize == 1 ? 0 : static_cast<uint16_t>(qsize + qsize / 2u);
        setup_error = RingError::BadQueueSize;
    } else if (setup == 5) {
        cfg.addrs.avail = GuestAddr(kAvailGpa + 1);  // not 2-aligned
        setup_error = RingError::RingMisaligned;
    } else if (setup == 6) {
        cfg.addrs.desc = GuestAddr(kDescGpa + 8);  // not 16-aligned
        setup_error = RingError::RingMisaligned;
    } else if (setup == 7) {
        cfg.addrs.used = GuestAddr(kCGpa);  // the device cannot write there
        setup_error = RingError::RingUnmapped;
    }

    // Ring image: defaults, then the input's pokes. Descriptors past the
    // table's end look valid too, so a missing `next` bound shows as a chain
    // popped that the model rejects.
    for (uint32_t i = 0; i < kMaxSize; ++i) {
        put_desc(kDescGpa, i, default_desc(style, i, qsize, kDataGpa, 64));
    }
    for (uint32_t i = 0; i < qsize; ++i) {
        g.store<uint16_t>(kAvailGpa + 4u + 2u * i, static_cast<uint16_t>(i));
    }
    g.store<uint16_t>(kAvailGpa + 2, u16_of(base + r.u8()));
    g.store<uint16_t>(kUsedGpa + 2, used0);
    g.store<uint16_t>(kAvailGpa + 4u + 2u * qsize, r.u16());  // used_event
    g.store<uint16_t>(kAvailGpa, r.u8() & 1u);                // avail.flags
    for (unsigned n = r.u8(); n > 0 && !r.empty(); --n) {
        const uint32_t i = uint32_t{r.u8()} % qsize;
        put_desc(kDescGpa, i, decode_desc(r, kDescGpa));
    }
    for (unsigned t = 0, tables = r.u8() % (kTables + 1); t < tables; ++t) {
        const uint64_t gpa = kTablesGpa + 0x1000u * t;
        const uint32_t entries = 1u + r.u8();
        const uint8_t tstyle = r.u8();
        for (uint32_t i = 0; i < kMaxSize; ++i) {
            put_desc(gpa, i, default_desc(tstyle, i, entries, kDataGpa + 0x4000, 32));
        }
        for (unsigned n = r.u8(); n > 0 && !r.empty(); --n) {
            const uint32_t i = r.u8() % entries;
            put_desc(gpa, i, decode_desc(r, kDescGpa));
        }
        const uint8_t link = r.u8();
        if ((link & 1u) != 0) {
            put_desc(kDescGpa, (link >> 1) % qsize,
                     make_desc(gpa, 16u * entries, VIRTQ_DESC_F_INDIRECT, 0));
        }
    }
    for (unsigned n = r.u8(); n > 0 && !r.empty(); --n) {
        const uint32_t slot = uint32_t{r.u8()} % qsize;
        uint16_t v = r.u8();
        if (v == 0xFF) v = r.u16();
        g.store<uint16_t>(kAvailGpa + 4u + 2u * slot, v);
    }

    const RingImage before = RingImage::take();
    auto q = expect_setup(SplitDeviceQueue::create(g.table(), cfg), setup_error);
    check(before == RingImage::take());
    if (q == nullptr) return 0;

    Harness h;
    h.q = std::move(q);
    h.cfg = cfg;
    h.restarts = restarted;
    h.m.size = qsize;
    h.m.event_idx = (features & 1u) != 0;
    h.m.indirect = (features & 2u) != 0;
    h.m.notify_on_empty = (features & 4u) != 0;
    h.m.last_avail = h.m.shadow_avail = base;
    h.m.used = used0;
    h.check_state();
    for (std::size_t op = 0; op < kMaxOps && !r.empty() && h.work < kWorkBudget; ++op) {
        h.run_op(r);
    }
    return 0;
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    return pvnet::fuzz::run_input(data, size);
}
