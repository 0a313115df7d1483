// Fuzz target: SplitDriverQueue against a hostile device (STYLE.md §6 "The
// frontend checks used entries the same way: id < size, in flight, len <=
// posted"; §11 "Fuzz").
//
// Input, read front to back (missing bytes read as zero):
//   header   size exponent (1..256; top bit: start near the 16-bit wrap),
//            EVENT_IDX, INDIRECT_DESC with indirect_max 0..8, indirect area
//            placement (valid, misaligned, running off the region),
//            [near the wrap: k and whether to end with a kick decision]
//   start    near the wrap, 65536 - k chains first cycle through the ring
//            (add, publish, an honest device uses them, reap; no kick
//            decision unless asked), so the ops run with avail.idx, used.idx
//            and last_used_idx just short of the wrap, and with up to 65535
//            adds since the last kick decision
//   op list  add chains (direct or indirect, 1..size buffers), publish,
//            kick_prepare, get_used (one or a burst), disable_cb,
//            enable_cb_prepare + poll, enable_cb, enable_cb_delayed; and the
//            device: completing honestly in order or out of order, writing
//            arbitrary used elements and used.idx, event words, and
//            scribbling over the descriptor table and avail ring (which the
//            driver must never read back)
//
// A reference model of the driver predicts every result: the add status and
// the descriptors it writes (the free list never hands out a descriptor in
// use), kick decisions, each get_used outcome and token, the event words and
// flags written. Independently: a reaped token was added and is returned at
// most once, its len is at most the writable bytes posted, num_free never
// exceeds the queue size, and a broken queue stays broken.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::fuzz {
namespace {

using mem::Access;
using mem::GuestAddr;
using ring::AddStatus;
using ring::Buf;
using ring::RingError;
using ring::SplitDriverQueue;
using ring::UsedBuf;
using virtio::virtq_desc;
using virtio::virtq_used_elem;
using virtio::VIRTQ_DESC_F_INDIRECT;
using virtio::VIRTQ_DESC_F_NEXT;
using virtio::VIRTQ_DESC_F_WRITE;

// Region A (fuzz_support.h) holds the ring image and the indirect tables.
constexpr uint64_t kIndirectGpa = 0x12000;  // up to 256 * 8 * 16 bytes
constexpr uint64_t kDataGpa = 0x1A000;      // buffer addresses (the driver never touches them)
constexpr std::size_t kImageBytes = 0xA000;
constexpr std::size_t kMaxOps = 256;

/// Region A only, made once per process.
GuestMemory& guest() {
    static GuestMemory* g = [] {
        auto* n = new GuestMemory;
        n->add(kAGpa, kABytes, Access::ReadWrite, "fuzz-driver");
        return n;
    }();
    return *g;
}

virtq_desc desc_at(uint64_t gpa) {
    virtq_desc d;
    std::memcpy(&d, guest().at(gpa), sizeof d);
    return d;
}

/// What the model knows of a chain the driver holds.
struct Chain {
    bool live = false;
    uint64_t token = 0;
    uint32_t in_bytes = 0;
    uint16_t ndescs = 0;
    std::vector<uint16_t> descs;  // ring descriptors it occupies
};

struct Harness {
    std::unique_ptr<SplitDriverQueue> q;
    uint16_t size = 1;
    bool event_idx = false;
    bool indirect = false;  // indirect tables in use (negotiated and indirect_max > 1)
    uint16_t indirect_max = 0;
    uint64_t indirect_gpa = kIndirectGpa;

    // Model of the driver.
    std::array<Chain, kMaxSize> heads{};
    std::array<bool, kMaxSize> owned{};  // ring descriptor in some live chain
    uint16_t num_free = 1;
    uint16_t avail_shadow = 0;
    uint16_t published = 0;
    uint16_t kicked = 0;
    uint32_t added = 0;  // adds since the last kick decision (not wrapped)
    uint16_t last_used = 0;
    uint16_t shadow_used = 0;
    bool cb_enabled = true;
    bool broken = false;
    // Tokens: unique per add, each may come back once.
    uint64_t next_token = 1;
    std::vector<bool> returned{false};
    // The honest device's cursors.
    uint16_t dev_last_avail = 0;
    uint16_t dev_used = 0;

    uint16_t mask() const { return u16_of(size - 1u); }
    uint64_t used_event_gpa() const { return kAvailGpa + 4u + 2u * size; }
    uint64_t avail_event_gpa() const { return kUsedGpa + 4u + 8u * size; }

    void check_state() const {
        check(q->broken() == broken);
        check(q->num_free() == num_free && num_free <= size);
        check(q->last_used_idx().value() == last_used);
        check(q->in_flight() == u16_of(avail_shadow - last_used));
        std::size_t in_use = 0;
        for (uint16_t i = 0; i < size; ++i) in_use += owned[i] ? 1u : 0u;
        check(in_use + num_free == size);
        if (broken) {
            const RingError e = q->broken_reason();
            check(e >= RingError::UsedIdxJump && e <= RingError::UsedLenTooLong);
        }
    }

    void add(Reader& r) {
        const uint8_t sel = r.u8();
        std::size_t n_out = sel & 3u;
        std::size_t n_in = (sel >> 2) & 3u;
        if ((sel & 0x80) != 0) {  // a long chain, up to the queue size
            const std::size_t total = 1u + uint32_t{r.u8()} % size;
            n_out = r.u8() % (total + 1);
            n_in = total - n_out;
        }
        if (n_out + n_in == 0) n_out = 1;
        while (n_out + n_in > size) (n_in > 0 ? n_in : n_out) -= 1;
        const uint8_t len_seed = r.u8();
        std::vector<Buf> out(n_out);
        std::vector<Buf> in(n_in);
        uint32_t in_bytes = 0;
        for (std::size_t k = 0; k < n_out + n_in; ++k) {
            Buf& b = k < n_out ? out[k] : in[k - n_out];
            b.gpa = GuestAddr(kDataGpa + 0x100u * k);
            b.len = 1u + static_cast<uint32_t>((len_seed * (k + 1) * 37u) & 0xFFFu);
            if (k >= n_out) in_bytes += b.len;
        }
        const std::size_t n = n_out + n_in;
        const uint64_t token = next_token;

        AddStatus want = AddStatus::Ok;
        const bool use_indirect = indirect && n > 1 && n <= indirect_max;
        const uint16_t needed = use_indirect ? 1 : static_cast<uint16_t>(n);
        if (broken) {
            want = AddStatus::Broken;
        } else if (num_free < needed) {
            want = AddStatus::NoSpace;
        }
        const AddStatus got = q->add(out, in, token);
        check(got == want);
        if (got != AddStatus::Ok) return;

        ++next_token;
        returned.push_back(false);
        const uint16_t head = guest().load<uint16_t>(kAvailGpa + 4u + 2u * (avail_shadow & mask()));
        check(head < size && !heads[head].live);
        Chain& c = heads[head];
        c = Chain{true, token, in_bytes, needed, {}};
        // What the driver wrote must describe exactly these buffers.
        auto expect = [&](const virtq_desc& d, std::size_t k) {
            const Buf& b = k < n_out ? out[k] : in[k - n_out];
            uint16_t flags = k < n_out ? 0 : VIRTQ_DESC_F_WRITE;
            if (k + 1 < n) flags |= VIRTQ_DESC_F_NEXT;
            check(d.addr.get() == b.gpa.value && d.len.get() == b.len &&
                  d.flags.get() == flags);
        };
        if (use_indirect) {
            const uint64_t table = indirect_gpa + uint64_t{head} * indirect_max * 16u;
            const virtq_desc top = desc_at(kDescGpa + 16u * head);
            check(top.addr.get() == table && top.len.get() == 16u * n &&
                  top.flags.get() == VIRTQ_DESC_F_INDIRECT);
            for (std::size_t k = 0; k < n; ++k) {
                const virtq_desc d = desc_at(table + 16u * k);
                expect(d, k);
                if (k + 1 < n) check(d.next.get() == k + 1);
            }
            check(!owned[head]);
            owned[head] = true;
            c.descs.push_back(head);
        } else {
            uint16_t i = head;
            for (std::size_t k = 0; k < n; ++k) {
                // The free list never hands out a descriptor another chain holds.
                check(i < size && !owned[i]);
                owned[i] = true;
                c.descs.push_back(i);
                const virtq_desc d = desc_at(kDescGpa + 16u * i);
                expect(d, k);
                i = d.next.get();
            }
        }
        num_free = u16_of(num_free - needed);
        ++avail_shadow;
        ++added;
    }

    void publish_model() {
        if (broken || published == avail_shadow) return;
        published = avail_shadow;
        check(guest().load<uint16_t>(kAvailGpa + 2) == published);
    }

    void publish() {
        q->publish();
        publish_model();
    }

    void kick_prepare() {
        bool want = false;
        const bool was_broken = broken;
        const uint16_t old = kicked;
        const bool got = q->kick_prepare();
        if (!was_broken) {
            publish_model();
            const uint32_t n = added;
            kicked = published;
            added = 0;
            // Nothing added: no kick, even if 2^16 adds brought avail.idx
            // back to `old`. 65535 adds or more: need_event's window may not
            // hold them, so EVENT_IDX kicks whatever avail_event says.
            if (n != 0 && event_idx && n >= pvnet::ring::kKickAddLimit) {
                want = true;
            } else if (n != 0) {
                if (event_idx) {
                    const uint16_t ev = guest().load<uint16_t>(avail_event_gpa());
                    want = u16_of(ev - old) < u16_of(published - old);
                } else {
                    want = (guest().load<uint16_t>(kUsedGpa) &
                            pvnet::virtio::VIRTQ_USED_F_NO_NOTIFY) == 0;
                }
            }
        }
        check(got == want);
    }

    bool get_used() {
        bool want = true;
        uint16_t id = 0;
        uint32_t len = 0;
        if (broken) {
            want = false;
        } else {
            if (last_used == shadow_used) {
                const uint16_t u = guest().load<uint16_t>(kUsedGpa + 2);
                if (u16_of(u - last_used) > u16_of(published - last_used)) {
                    broken = true;
                    want = false;
                } else {
                    shadow_used = u;
                    if (u == last_used) want = false;
                }
            }
            if (want) {
                virtq_used_elem e;
                std::memcpy(&e, guest().at(kUsedGpa + 4u + 8u * (last_used & mask())), sizeof e);
                len = e.len.get();
                if (e.id.get() >= size || !heads[e.id.get()].live ||
                    len > heads[e.id.get()].in_bytes) {
                    broken = true;
                    want = false;
                } else {
                    id = static_cast<uint16_t>(e.id.get());
                }
            }
        }
        UsedBuf got{};
        check(q->get_used(got) == want);
        if (!want) return false;

        Chain& c = heads[id];
        // Independently of the model: a token we added, not returned before,
        // with no more bytes than were posted writable.
        check(got.token > 0 && got.token < next_token && !returned[got.token]);
        returned[got.token] = true;
        check(got.token == c.token && got.len == len && got.len <= c.in_bytes);
        for (uint16_t d : c.descs) owned[d] = false;
        num_free = u16_of(num_free + c.ndescs);
        c.live = false;
        ++last_used;
        if (event_idx && cb_enabled) check(guest().load<uint16_t>(used_event_gpa()) == last_used);
        return true;
    }

    /// The start near the wrap: `n` one-buffer chains through the ring in
    /// bursts of up to `size`, each add and reap checked, the model moved
    /// along; then a kick decision if `decide`.
    void fast_forward(uint32_t n, bool decide) {
        const Buf in{GuestAddr(kDataGpa), 64};
        while (n > 0) {
            const auto burst = static_cast<uint16_t>(n < size ? n : size);
            for (uint16_t i = 0; i < burst; ++i) {
                check(q->add({}, {&in, 1}, 0) == AddStatus::Ok);
            }
            q->publish();
            for (uint16_t i = 0; i < burst; ++i) {
                const uint16_t slot = u16_of(avail_shadow + i) & mask();
                write_used(dev_used, guest().load<uint16_t>(kAvailGpa + 4u + 2u * slot), 0);
                ++dev_used;
            }
            guest().store<uint16_t>(kUsedGpa + 2, dev_used);
            for (uint16_t i = 0; i < burst; ++i) {
                UsedBuf u{1, 1};
                check(q->get_used(u) && u.token == 0 && u.len == 0);
            }
            avail_shadow = published = dev_last_avail = u16_of(avail_shadow + burst);
            last_used = shadow_used = dev_used;
            added += burst;
            n -= burst;
        }
        check(q->num_free() == size && !q->broken());
        if (decide) kick_prepare();
    }

    void write_used(uint16_t slot, uint32_t id, uint32_t len) {
        virtq_used_elem e{};
        e.id.set(id);
        e.len.set(len);
        std::memcpy(guest().at(kUsedGpa + 4u + 8u * (slot & mask())), &e, sizeof e);
    }

    /// The device uses `head` as its next used entry and publishes it.
    void complete(uint16_t head, Reader& r) {
        const uint32_t have = head < size && heads[head].live ? heads[head].in_bytes : 0;
        const uint8_t sel = r.u8();
        const uint32_t len = (sel & 1u) != 0 ? have : have / (1u + sel);
        write_used(dev_used, head, len);
        ++dev_used;
        guest().store<uint16_t>(kUsedGpa + 2, dev_used);
    }

    std::vector<uint16_t> live_heads() const {
        std::vector<uint16_t> v;
        for (uint16_t i = 0; i < size; ++i) {
            if (heads[i].live) v.push_back(i);
        }
        return v;
    }

    /// The driver's interrupt-suppression words: avail.flags and used_event.
    struct EventWords {
        uint16_t flags;
        uint16_t used_event;
    };
    EventWords words() const {
        return {guest().load<uint16_t>(kAvailGpa), guest().load<uint16_t>(used_event_gpa())};
    }
    /// After a re-arm to used_event `event`: EVENT_IDX moves used_event and
    /// leaves the flags alone, otherwise the flags go to 0. A broken queue
    /// writes neither.
    void check_rearmed(const EventWords& before, uint16_t event) {
        const EventWords now = words();
        if (broken) {
            check(now.flags == before.flags && now.used_event == before.used_event);
            return;
        }
        cb_enabled = true;
        if (event_idx) {
            check(now.used_event == event && now.flags == before.flags);
        } else {
            check(now.flags == 0 && now.used_event == before.used_event);
        }
    }

    void run_op(Reader& r) {
        switch (r.u8() % 14) {
            case 0: add(r); break;
            case 1: publish(); break;
            case 2: kick_prepare(); break;
            case 3:  // the device completes in order what was published
                for (unsigned k = 1u + r.u8() % 4u; k > 0 && dev_last_avail != published; --k) {
                    const uint16_t slot = dev_last_avail & mask();
                    complete(guest().load<uint16_t>(kAvailGpa + 4u + 2u * slot), r);
                    ++dev_last_avail;
                }
                break;
            case 4: {  // ... or out of order
                const std::vector<uint16_t> live = live_heads();
                complete(live.empty() ? r.u8() : live[r.u8() % live.size()], r);
                break;
            }
            case 5: {  // an arbitrary used element
                const uint16_t slot = r.u8();
                const uint8_t sel = r.u8();
                const std::vector<uint16_t> live = live_heads();
                uint32_t id = sel;
                if ((sel & 0x80) == 0 && !live.empty()) id = live[sel % live.size()];
                if (sel == 0xFF) id = r.u32();
                write_used(slot, id, (sel & 0x40) != 0 ? r.u32() : r.u8());
                break;
            }
            case 6: {  // an arbitrary used.idx
                const uint8_t sel = r.u8();
                dev_used = (sel & 1u) != 0 ? r.u16() : u16_of(last_used + sel / 2u);
                guest().store<uint16_t>(kUsedGpa + 2, dev_used);
                break;
            }
            case 7:
                guest().store<uint16_t>(avail_event_gpa(), r.u16());
                guest().store<uint16_t>(kUsedGpa, r.u8() & 1u);  // used.flags
                break;
            case 8: {  // the device scribbles over driver-owned ring memory
                const uint32_t off = r.u16() % (16u * size + 6u + 2u * size);
                const uint64_t gpa = off < 16u * size ? kDescGpa + off
                                                      : kAvailGpa + (off - 16u * size);
                *guest().at(gpa) = static_cast<std::byte>(r.u8());
                break;
            }
            case 9: get_used(); break;
            case 10:
                for (uint32_t k = 0; k <= size && get_used(); ++k) {
                }
                break;
            case 11: {
                // NO_INTERRUPT without EVENT_IDX; with it the flags stay as they
                // are (2.7.10.1) and used_event simply stops moving.
                const EventWords before = words();
                q->disable_cb();
                const EventWords now = words();
                check(now.used_event == before.used_event);
                if (broken || event_idx) {
                    check(now.flags == before.flags);
                } else {
                    check(now.flags == pvnet::virtio::VIRTQ_AVAIL_F_NO_INTERRUPT);
                }
                if (!broken) cb_enabled = false;
                break;
            }
            case 12: {
                const EventWords before = words();
                if ((r.u8() & 1u) != 0) {
                    const bool want = broken || guest().load<uint16_t>(kUsedGpa + 2) == last_used;
                    check(q->enable_cb() == want);
                    check_rearmed(before, last_used);
                } else {
                    check(q->enable_cb_prepare().value() == last_used);
                    check_rearmed(before, last_used);
                    if ((r.u8() & 1u) != 0) guest().store<uint16_t>(kUsedGpa + 2, r.u16());
                    const bool more = !broken && guest().load<uint16_t>(kUsedGpa + 2) != last_used;
                    check(q->poll(pvnet::ring::RingIdx(last_used)) == more);
                }
                break;
            }
            default: {
                // Re-armed for when 3/4 of what is outstanding has been used.
                const auto bufs = static_cast<uint16_t>(u16_of(avail_shadow - last_used) * 3u / 4u);
                bool want = true;
                if (!broken) {
                    want = u16_of(guest().load<uint16_t>(kUsedGpa + 2) - last_used) <= bufs;
                }
                const EventWords before = words();
                check(q->enable_cb_delayed() == want);
                check_rearmed(before, u16_of(last_used + bufs));
                break;
            }
        }
        check_state();
    }
};

/// One input: decode it and check every call against the model.
int run_input(const uint8_t* data, std::size_t size) {
    GuestMemory& g = guest();
    Reader r(data, size);
    std::memset(g.at(kAGpa), 0, kImageBytes);

    const uint8_t size_sel = r.u8();
    const auto qsize = static_cast<uint16_t>(1u << ((size_sel & 0x7Fu) % 9));
    const uint8_t features = r.u8();
    const bool near_wrap = (size_sel & 0x80u) != 0;
    uint8_t wrap_k = 0;
    uint8_t wrap_how = 0;
    if (near_wrap) {
        wrap_k = r.u8();
        wrap_how = r.u8();
    }
    pvnet::ring::DriverQueueConfig cfg;
    cfg.addrs = {qsize, GuestAddr(kDescGpa), GuestAddr(kAvailGpa), GuestAddr(kUsedGpa)};
    cfg.event_idx = (features & 1u) != 0;
    cfg.indirect = (features & 2u) != 0;
    cfg.indirect_max = static_cast<uint16_t>((features >> 2) % 9u);
    cfg.indirect_area = GuestAddr(kIndirectGpa);
    const bool tables = cfg.indirect && cfg.indirect_max > 1;
    RingError setup_error = RingError::Count;
    if ((features & 0xC0u) == 0x40u) {
        cfg.indirect_area = GuestAddr(kIndirectGpa + 8);  // not 16-aligned
        if (tables) setup_error = RingError::RingMisaligned;
    } else if ((features & 0xC0u) == 0x80u) {
        // Ends past the region unless the tables are small.
        cfg.indirect_area = GuestAddr(kAGpa + kABytes - 0x1000);
        if (tables && uint64_t{qsize} * cfg.indirect_max * 16u > 0x1000) {
            setup_error = RingError::RingUnmapped;
        }
    }

    auto q = expect_setup(SplitDriverQueue::create(g.table(), cfg), setup_error);
    if (q == nullptr) return 0;

    Harness h;
    h.q = std::move(q);
    h.size = qsize;
    h.num_free = qsize;
    h.event_idx = cfg.event_idx;
    h.indirect = tables;
    h.indirect_max = cfg.indirect_max;
    h.indirect_gpa = cfg.indirect_area.value;
    h.check_state();
    if (near_wrap) {
        h.fast_forward(0x10000u - wrap_k, (wrap_how & 1u) != 0);
        h.check_state();
    }
    for (std::size_t op = 0; op < kMaxOps && !r.empty(); ++op) h.run_op(r);
    return 0;
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    return pvnet::fuzz::run_input(data, size);
}
