// Fuzz target: the backend device, VhostNet<Port>, driven through its
// handlers — handle_tx, handle_rx with and without VIRTIO_NET_F_MRG_RXBUF,
// handle_ctrl (CTRL_VQ, NOTF_COAL), the coalescing timers, the direct path
// process_tx_now — and its control plane (stop_vring, start_vring at the
// returned base, reset + configure), against a hostile driver's split rings
// and a scripted port (STYLE.md §11 "Fuzz"; the structure decoding of
// rust-vmm/vm-virtio fuzz/fuzz_targets/virtio_queue.rs).
//
// Input, read front to back (missing bytes read as zero):
//   header      device options (poll mode, no call / kick / err fds, the port
//               peeks), tx and rx weights (packets 0..8, 0 = no limit; bytes),
//               tx and rx coalescing, the port's max frame (u16, 0: none);
//               per vring (rx, tx, ctrl): size 1..32768 and the default
//               descriptor table (none; one- or two-descriptor or indirect
//               chains of the vring's role)
//   configure   features (EVENT_IDX, INDIRECT_DESC, NOTIFY_ON_EMPTY,
//               MRG_RXBUF, CTRL_VQ, NOTF_COAL, GUEST_TSO4), which vrings
//               start, and per vring the base (65535 - k, 0, or any), used.idx
//               (up to 255 behind the base, or any) and avail.idx (base + 0..size)
//   ring image  up to 63 pokes: raw descriptors (any addr/len/flags/next),
//               indirect table entries, avail slots, well-formed chains
//   op list     up to 128 of: handle_tx, handle_rx, handle_ctrl,
//               process_tx_now, a timer, a worker round; publish n
//               (avail.idx += n), avail.idx jumps; the pokes; avail.flags /
//               used_event; port frames of random lengths; port mode (peek or
//               not; a Sent / Dropped / Retry script); stop_vring, start_vring
//               at the returned base (or another), both; reset + configure
//
// Guest memory (fuzz_support.h GuestMemory: guarded memfds): the main region
// (three ring areas, indirect tables, data), a page adjacent to it (buffers
// crossing map to two pieces), a read-only page behind a hole.
//
// The reference model, checked inside the target:
// 1. Every chain made available is used, or its vring is broken. Between two
//    handler calls no chain is in flight, so per call: the used entries the
//    call published are the chains it consumed — the heads in the avail
//    slots from the old to the new last_avail_idx — as a multiset, each
//    once (a sub-multiset if the call broke the ring); tx used lengths are
//    0, control 0 or 1, rx lengths sum to rx_bytes' increase; used.idx in
//    memory is the queue's; a call pops no further than avail.idx (or the
//    device's shadow of it); only the handler's own vring moves; a broken
//    vring never moves and is reported (NEEDS_RESET) by its handler. After
//    the op list, stopped vrings are started again and the handlers run
//    until idle (the port accepting, a flood of 1-byte frames, peeking):
//    every vring that is not broken has consumed up to avail.idx.
// 2. No run exceeds its weight: {tx,rx}_max_run_pkts <= weight.pkts (when
//    pkts != 0); a control run serves at most kCtrlWeight commands.
// 3. Frames in = frames out + drops: every frame the port hands over is
//    rx_pkts or rx_drop_no_room, delivered bytes are rx_bytes; tx chains
//    consumed = tx_pkts + tx_drop_bad_chain + tx_drop_port, each as the port
//    answered (Retry chains are not consumed); control chains consumed =
//    cmds_ok + cmds_err, each OK applied.
// The port checks that every iovec lies inside a guest region with the
// access it needs and touches both ends (guard pages fault on strays).
// When a writable descriptor (or a frame the device wrote) may land on ring
// memory, the ring no longer shows what the device read: the input keeps
// the count checks and drops the content checks. So does a call that
// published more used entries than the ring holds (possible only after the
// driver made more than `size` available, which the device cannot always
// see: it checks avail.idx against last_avail_idx when it reads it).
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/backend/vhost_net.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/port/port.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_config.h"
#include "pvnet/virtio/virtio_net.h"
#include "pvnet/virtio/virtio_ring.h"

namespace pvnet::fuzz {
namespace {

using backend::VhostNetStats;
using mem::Access;
using mem::GuestAddr;
using port::SendResult;
using ring::RingError;
using virtio::virtq_desc;
using virtio::VIRTQ_DESC_F_INDIRECT;
using virtio::VIRTQ_DESC_F_NEXT;
using virtio::VIRTQ_DESC_F_WRITE;
using Layout = virtio::SplitRingLayout;

constexpr uint16_t kRx = 0;  // vring numbers of pair 0 and the control queue
constexpr uint16_t kTx = 1;
constexpr uint16_t kCtrl = 2;
constexpr uint16_t kVrings = 3;
constexpr uint32_t kHdr = backend::kHdrBytes;

// Guest-physical layout of the main region: one 1 MiB area per vring (a ring
// of 32768 entries takes 832 KiB), the indirect tables, the data.
constexpr uint64_t kMainGpa = 0x100000;
constexpr uint64_t kRingAreaBytes = 0x100000;
constexpr uint64_t ring_gpa(uint16_t v) { return kMainGpa + kRingAreaBytes * v; }
constexpr uint64_t kTablesGpa = kMainGpa + kVrings * kRingAreaBytes;
constexpr uint32_t kTables = 8;
constexpr uint32_t kTableEntries = 256;
constexpr uint64_t kTableBytes = 16u * kTableEntries;
constexpr uint64_t kDataGpa = kTablesGpa + kTables * kTableBytes;
constexpr uint64_t kDataBytes = 0x20000;
constexpr uint64_t kCmdGpa = kDataGpa;  // default control commands, 16 bytes each
constexpr uint32_t kDataStart = 0x100;  // chains' buffers go after them
constexpr uint64_t kMainBytes = kDataGpa + kDataBytes - kMainGpa;
constexpr uint64_t kBGpa = kMainGpa + kMainBytes;  // one page, adjacent to the main region
constexpr uint64_t kBBytes = 0x1000;
constexpr uint64_t kCGpa = kBGpa + kBBytes + 0x1000;  // read-only, behind a one-page hole
constexpr uint64_t kCBytes = 0x1000;

constexpr std::size_t kMaxPokes = 64;
constexpr std::size_t kMaxOps = 128;
/// Chains made available per input (charged as avail.idx moves ahead of the
/// device): bounds the work of one input, the final drain included.
constexpr uint32_t kBudget = 4096;
constexpr std::size_t kPortFrames = 256;

/// The three regions, made once per process.
GuestMemory& guest() {
    static GuestMemory* g = [] {
        auto* m = new GuestMemory;
        m->add(kMainGpa, kMainBytes, Access::ReadWrite, "fuzz-vhost-net");
        m->add(kBGpa, kBBytes, Access::ReadWrite, "fuzz-vhost-net");
        m->add(kCGpa, kCBytes, Access::Read, "fuzz-vhost-net");
        return m;
    }();
    return *g;
}

notify::EventFd must_fd() {
    auto r = notify::EventFd::create();
    FUZZ_CHECK(r.has_value());
    return std::move(r.value());
}

/// kick, call and err per vring, shared by every input (the device only
/// signals, consumes and watches them).
struct Doorbells {
    std::vector<notify::EventFd> kick, call, err;
};
Doorbells& bells() {
    static Doorbells* b = [] {
        auto* d = new Doorbells;
        for (uint16_t v = 0; v < kVrings; ++v) {
            d->kick.push_back(must_fd());
            d->call.push_back(must_fd());
            d->err.push_back(must_fd());
        }
        return d;
    }();
    return *b;
}

/// The guest region holding [host, host + len), or null.
const ModelRegion* region_of_host(const std::byte* host, std::size_t len) {
    for (const ModelRegion& r : guest().regions()) {
        const auto p = std::bit_cast<uintptr_t>(host);
        const auto base = std::bit_cast<uintptr_t>(static_cast<const std::byte*>(r.host));
        if (p >= base && len <= r.size && p - base <= r.size - len) return &r;
    }
    return nullptr;
}

/// [gpa, gpa + len) meets ring memory (the ring areas and indirect tables).
bool meets_ring_memory(uint64_t gpa, uint64_t len) {
    if (len == 0 || gpa > UINT64_MAX - len) return false;  // rejected before any access
    return gpa < kDataGpa && gpa + len > kMainGpa;
}

// ---------------------------------------------------------------------------
// The port: the world behind the device.

struct FuzzPort {
    // rx: frames waiting, by length (hdr + frame)
    std::array<uint32_t, kPortFrames> frames{};
    std::size_t head = 0;
    std::size_t tail = 0;
    bool peek = false;       ///< peek_len() tells the next length (else 0)
    bool drain = false;      ///< accept every send; a flood of 1-byte frames, peeked
    bool mergeable = false;  ///< the device's rx mode, for the counts
    uint32_t max_frame = 0;
    uint64_t recvs = 0;         ///< recv() calls: frames handed over
    uint64_t rx_none = 0;       ///< recv() with nothing waiting
    uint64_t rx_no_fit = 0;     ///< dropped: the buffers were too small
    uint64_t rx_short = 0;      ///< written, but below the header (mergeable: a drop)
    uint64_t rx_delivered = 0;  ///< written, counted as delivered by the device
    uint64_t rx_bytes = 0;
    bool wrote_ring = false;  ///< a recv iovec met ring memory
    // tx
    std::array<SendResult, 8> script{};
    uint32_t script_len = 0;  ///< 0: Sent
    uint32_t script_pos = 0;
    uint64_t sent = 0, sent_bytes = 0, dropped = 0, retries = 0;

    bool rx_pending() noexcept { return drain || head != tail; }
    uint32_t peek_len() noexcept {
        if (drain) return 1;
        return peek && head != tail ? frames[head] : 0;
    }
    uint32_t max_frame_bytes() const noexcept { return max_frame; }

    /// Each piece: non-empty, inside one guest region that allows `access`;
    /// both ends touched.
    void check_iov(const iovec& v, Access access) noexcept {
        FUZZ_CHECK(v.iov_len != 0);
        const auto* host = static_cast<const std::byte*>(v.iov_base);
        const ModelRegion* r = region_of_host(host, v.iov_len);
        FUZZ_CHECK(r != nullptr && mem::allows(r->access, access));
        touch(v, access);
        if (access == Access::Write && r == &guest().regions()[0]) {
            const uint64_t gpa = r->gpa + static_cast<uint64_t>(host - r->host);
            if (meets_ring_memory(gpa, v.iov_len)) wrote_ring = true;
        }
    }

    uint32_t recv(std::span<const iovec> dst) noexcept {
        ++recvs;
        if (!rx_pending()) {
            ++rx_none;
            return 0;
        }
        const uint32_t len = drain ? 1 : frames[head++];
        uint64_t room = 0;
        for (const iovec& v : dst) {
            check_iov(v, Access::Write);
            room += v.iov_len;
        }
        if (room < len) {
            ++rx_no_fit;
            return 0;
        }
        // A zero virtio_net_hdr, then a pattern whose bytes never form a
        // writable descriptor's flags.
        uint32_t off = 0;
        for (const iovec& v : dst) {
            auto* p = static_cast<std::byte*>(v.iov_base);
            for (std::size_t i = 0; i < v.iov_len && off < len; ++i, ++off) {
                p[i] = off < kHdr ? std::byte{0} : std::byte{0xA5};
            }
            if (off == len) break;
        }
        if (mergeable && len < kHdr) {
            ++rx_short;
        } else {
            ++rx_delivered;
            rx_bytes += len;
        }
        return len;
    }

    SendResult send(std::span<const iovec> src, uint32_t len) noexcept {
        uint64_t total = 0;
        for (const iovec& v : src) {
            check_iov(v, Access::Read);
            total += v.iov_len;
        }
        // The device hands over whole packets, header included.
        FUZZ_CHECK(total == len && len >= kHdr);
        SendResult r = SendResult::Sent;
        if (!drain && script_len != 0) r = script[script_pos++ % script_len];
        switch (r) {
            case SendResult::Sent:
                ++sent;
                sent_bytes += len;
                break;
            case SendResult::Dropped:
                ++dropped;
                break;
            case SendResult::Retry:
                ++retries;
                break;
        }
        return r;
    }
};
static_assert(port::Port<FuzzPort> && port::HasPeekLen<FuzzPort> && port::HasMaxFrame<FuzzPort>);

using Dev = backend::VhostNet<FuzzPort>;

// ---------------------------------------------------------------------------
// Decoding helpers.

// Multi-byte values, little-endian, their bytes read in sequence (Reader's
// own u16() combines two u8() calls in one expression, whose order C++
// leaves unspecified; clang 14 and g++ 12 happen to agree).
uint16_t rd16(Reader& r) {
    const uint8_t lo = r.u8();
    const uint8_t hi = r.u8();
    return static_cast<uint16_t>(lo | hi << 8);
}
uint32_t rd32(Reader& r) {
    const uint16_t lo = rd16(r);
    const uint16_t hi = rd16(r);
    return lo | uint32_t{hi} << 16;
}
uint64_t rd64(Reader& r) {
    const uint32_t lo = rd32(r);
    const uint32_t hi = rd32(r);
    return lo | uint64_t{hi} << 32;
}


uint32_t biased_u32(Reader& r) {
    switch (r.u8() % 5) {
        case 0:
            return 0;
        case 1:
            return 1u + r.u8() % 16u;
        case 2:
            return 1'000'000u + r.u8() - 128u;  // around kNotfCoalMaxUsecs
        case 3:
            return UINT32_MAX - r.u8();
        default:
            return rd32(r);
    }
}

/// A frame the port offers (hdr + frame bytes), its length biased to the
/// edges: below the header, the header alone, an MTU, the largest frame.
uint32_t frame_len(Reader& r, uint32_t max_frame) {
    const uint32_t mtu_frame = kHdr + (max_frame != 0 ? max_frame : backend::kDefaultMaxFrameBytes);
    switch (r.u8() % 8) {
        case 0:
            return 1u + r.u8() % (kHdr - 1u);
        case 1:
            return kHdr;
        case 2:
            return kHdr + 1u + r.u8();
        case 3:
            return kHdr + rd16(r) % 1519u;
        case 4:
            return mtu_frame - 1u + r.u8() % 3u;
        case 5:
            return backend::kMaxGsoPacketBytes - r.u8();
        case 6:
            return 1u + rd16(r);
        default:
            return kHdr + 60u;
    }
}

struct Snap {
    bool started = false;
    bool broken = false;
    uint16_t last = 0;  ///< last_avail_idx
    uint16_t used = 0;  ///< the queue's used.idx
};

/// The counters a handler call moves.
struct Counts {
    uint64_t tx_pkts, tx_bytes, tx_bad, tx_port, tx_retry;
    uint64_t rx_pkts, rx_bytes, rx_bad, rx_no_room;
    uint64_t ctrl_ok, ctrl_err, coal_updates;
};

struct Vring {
    uint16_t size = 1;
    ring::SplitRingAddrs addrs;
    bool exists = false;   ///< in the current configuration
    bool started = false;  ///< as the model expects it
    uint16_t base = 0;     ///< a stopped vring's base
    uint64_t consumed = 0;
    uint16_t mask() const { return static_cast<uint16_t>(size - 1u); }
    uint64_t avail_idx_gpa() const { return addrs.avail.value + Layout::avail_idx_off(); }
    uint64_t slot_gpa(uint16_t slot) const {
        return addrs.avail.value + Layout::avail_ring_off(slot & mask());
    }
    uint64_t used_idx_gpa() const { return addrs.used.value + Layout::used_idx_off(); }
    uint64_t used_elem_gpa(uint16_t idx) const {
        return addrs.used.value + Layout::used_ring_off(idx & mask());
    }
};

/// Bytes of each ring area the previous input may have left dirty.
std::array<std::size_t, kVrings>& dirty_ring_bytes() {
    static std::array<std::size_t, kVrings> d{};
    return d;
}

// ---------------------------------------------------------------------------
// The harness: the device, the port, the model, the ops.

class Harness {
public:
    explicit Harness(Reader& r) : r_(r) {}

    void setup();
    void pokes() {
        for (unsigned n = r_.u8() % kMaxPokes; n > 0 && !r_.empty(); --n) poke();
    }
    void run_ops() {
        for (std::size_t i = 0; i < kMaxOps && !r_.empty(); ++i) op();
    }
    void drain();

private:
    GuestMemory& g() const { return guest(); }
    uint16_t load16(uint64_t gpa) const { return g().load<uint16_t>(gpa); }
    void store16(uint64_t gpa, uint16_t v) const { g().store<uint16_t>(gpa, v); }
    bool aliased() const { return aliased_ || port_.wrote_ring; }
    uint16_t pick_vring() { return static_cast<uint16_t>(r_.u8() % kVrings); }

    const ring::SplitDeviceQueue& queue(uint16_t v) const {
        if (v == kCtrl) return dev_->ctrl_queue()->queue();
        return v == kRx ? dev_->rx_queue() : dev_->tx_queue();
    }
    Snap snap(uint16_t v) const;
    Counts counts() const;
    void check_counts() const;
    uint16_t last_avail(uint16_t v) const;
    bool set_avail(uint16_t v, uint16_t value);
    bool charge(uint16_t v, uint16_t from_last, uint16_t to_last, uint16_t to_avail);
    backend::VringSetup vring_setup(uint16_t v, uint16_t base) const;

    void write_defaults(uint16_t v, uint8_t style);
    void configure();
    uint32_t call(unsigned which);
    /// What one call did to vring `v`; sets over_full_ when it published
    /// more used entries than the ring holds.
    uint16_t progress(uint16_t v, const Snap& b, const Snap& a, uint64_t& len_sum);

    void note_desc(const virtq_desc& d) {
        if ((d.flags.get() & VIRTQ_DESC_F_WRITE) != 0 &&
            meets_ring_memory(d.addr.get(), d.len.get())) {
            aliased_ = true;
        }
    }
    virtq_desc decode_desc();
    uint64_t alloc(uint32_t len);
    void add_chain();
    void poke();
    void op();
    void stop(uint16_t v);
    void start(uint16_t v, uint8_t sel);

    Reader& r_;
    FuzzPort port_;
    std::unique_ptr<Dev> dev_;
    backend::VhostNetOptions opt_;
    std::array<Vring, kVrings> v_{};
    uint64_t features_ = 0;
    uint8_t dev_opts_ = 0;
    bool aliased_ = false;  ///< a writable descriptor met ring memory
    bool broke_since_reset_ = false;
    bool over_full_ = false;         ///< the last call overran a used ring (progress)
    uint32_t budget_ = kBudget;
    uint32_t cursor_ = kDataStart;  ///< next chain buffer in the data area
};

Snap Harness::snap(uint16_t v) const {
    Snap s;
    if (!dev_->vring_started(v)) return s;
    s.started = true;
    s.broken = dev_->vring_broken(v);
    const ring::SplitDeviceQueue& q = queue(v);
    s.last = q.last_avail_idx().value();
    s.used = q.used_idx().value();
    FUZZ_CHECK(s.broken == (q.broken_reason() != RingError::Count));
    // The device's own bugs, never the driver's: counted, never expected.
    FUZZ_CHECK(q.stats().errors.get(RingError::PushIdNotInflight) == 0);
    FUZZ_CHECK(q.stats().errors.get(RingError::PushLenTooLong) == 0);
    return s;
}

Counts Harness::counts() const {
    const VhostNetStats& s = dev_->stats();
    Counts c{};
    c.tx_pkts = s.tx_pkts.get();
    c.tx_bytes = s.tx_bytes.get();
    c.tx_bad = s.tx_drop_bad_chain.get();
    c.tx_port = s.tx_drop_port.get();
    c.tx_retry = s.tx_retry.get();
    c.rx_pkts = s.rx_pkts.get();
    c.rx_bytes = s.rx_bytes.get();
    c.rx_bad = s.rx_drop_bad_chain.get();
    c.rx_no_room = s.rx_drop_no_room.get();
    if (const backend::CtrlQueue* cq = dev_->ctrl_queue()) {
        c.ctrl_ok = cq->stats().cmds_ok.get();
        c.ctrl_err = cq->stats().cmds_err.total();
    }
    c.coal_updates = dev_->device_stats().coalesce_updates.get();
    return c;
}

/// Checks 2 and 3 on the totals: the port's record against the device's.
void Harness::check_counts() const {
    const VhostNetStats& s = dev_->stats();
    // Every frame handed over is delivered or counted as dropped.
    FUZZ_CHECK(port_.recvs == s.rx_pkts.get() + s.rx_drop_no_room.get());
    FUZZ_CHECK(port_.rx_delivered == s.rx_pkts.get() && port_.rx_bytes == s.rx_bytes.get());
    FUZZ_CHECK(port_.rx_none + port_.rx_no_fit + port_.rx_short == s.rx_drop_no_room.get());
    // Every send answered as the port answered it.
    FUZZ_CHECK(port_.sent == s.tx_pkts.get() && port_.sent_bytes == s.tx_bytes.get());
    FUZZ_CHECK(port_.dropped == s.tx_drop_port.get() && port_.retries == s.tx_retry.get());
    FUZZ_CHECK(v_[kTx].consumed ==
               s.tx_pkts.get() + s.tx_drop_bad_chain.get() + s.tx_drop_port.get());
    // No run past its weight.
    if (opt_.tx_weight.pkts != 0) FUZZ_CHECK(s.tx_max_run_pkts.get() <= opt_.tx_weight.pkts);
    if (opt_.rx_weight.pkts != 0) FUZZ_CHECK(s.rx_max_run_pkts.get() <= opt_.rx_weight.pkts);
    // NEEDS_RESET only after a vring broke.
    if (dev_->status() != 0) FUZZ_CHECK(broke_since_reset_);
}

uint16_t Harness::last_avail(uint16_t v) const { return v_[v].started ? snap(v).last : v_[v].base; }

/// Chains the device may consume from `last` up to `avail`: all of them
/// while its shadow of avail.idx (up to `size` past `last`) is within `size`
/// of `avail`, else none (it breaks the ring when it looks).
uint16_t pending_of(uint16_t last, uint16_t avail, uint16_t size) {
    const uint16_t d = u16_of(uint32_t{avail} - last);
    return d <= 2u * size ? d : 0;
}

/// Takes from the budget what moving the device to `to_last` and avail.idx
/// to `to_avail` makes newly available; false (nothing taken) if it is short.
bool Harness::charge(uint16_t v, uint16_t from_last, uint16_t to_last, uint16_t to_avail) {
    const Vring& q = v_[v];
    const uint16_t before = pending_of(from_last, load16(q.avail_idx_gpa()), q.size);
    const uint16_t after = pending_of(to_last, to_avail, q.size);
    if (after <= before) return true;
    const uint32_t more = uint32_t{after} - before;
    if (more > budget_) return false;
    budget_ -= more;
    return true;
}

bool Harness::set_avail(uint16_t v, uint16_t value) {
    const uint16_t last = last_avail(v);
    if (!charge(v, last, last, value)) return false;
    // ORDER: none needed; the device runs only inside handler calls.
    store16(v_[v].avail_idx_gpa(), value);
    return true;
}

backend::VringSetup Harness::vring_setup(uint16_t v, uint16_t base) const {
    backend::VringSetup s;
    s.addrs = v_[v].addrs;
    s.base.last_avail_idx = base;
    s.kick = (dev_opts_ & 4u) != 0 ? nullptr : &bells().kick[v];
    s.call = (dev_opts_ & 2u) != 0 ? nullptr : &bells().call[v];
    s.err = (dev_opts_ & 16u) != 0 ? nullptr : &bells().err[v];
    return s;
}

/// The default descriptor table and avail slots of vring `v` for its role.
void Harness::write_defaults(uint16_t v, uint8_t style) {
    const Vring& q = v_[v];
    const uint16_t size = q.size;
    const unsigned kind = style % 4u;
    const unsigned sel = (style >> 2) % 4u;
    static constexpr std::array<uint32_t, 4> kTxLen{64, kHdr + 1514, kHdr, 2048};
    static constexpr std::array<uint32_t, 4> kRxLen{2048, 64, kHdr + 1514, 1};
    auto buf = [](uint32_t i) { return kDataGpa + kDataStart + (i % 32u) * 2048u; };
    auto put = [&](uint32_t i, const virtq_desc& d) {
        std::memcpy(g().at(q.addrs.desc.value + 16u * i), &d, sizeof d);
    };
    for (uint32_t i = 0; i < size; ++i) {
        uint32_t slot_head = i;
        if (kind == 1) {
            if (v == kTx) put(i, make_desc(buf(i), kTxLen[sel], 0, 0));
            if (v == kRx) put(i, make_desc(buf(i), kRxLen[sel], VIRTQ_DESC_F_WRITE, 0));
            if (v == kCtrl) put(i, make_desc(kCmdGpa, 10, 0, 0));
        } else if (kind == 2) {
            const bool first = i % 2u == 0;
            const auto next = static_cast<uint16_t>((i + 1u) & q.mask());
            const auto nf = static_cast<uint16_t>(first ? VIRTQ_DESC_F_NEXT : 0u);
            if (v == kTx) put(i, make_desc(buf(i), first ? kHdr : kTxLen[sel], nf, next));
            if (v == kRx) {
                put(i, make_desc(buf(i), kRxLen[sel],
                                 static_cast<uint16_t>(nf | VIRTQ_DESC_F_WRITE), next));
            }
            if (v == kCtrl) {
                put(i, first ? make_desc(kCmdGpa + 16u * (i / 2u % 2u), 10, nf, next)
                             : make_desc(kCmdGpa + 12u + 16u * (i / 2u % 2u), 1, VIRTQ_DESC_F_WRITE,
                                         0));
            }
            slot_head = (2u * i) & q.mask();
        } else if (kind == 3) {
            // The default tables of the role: 0-1 tx, 2-3 rx, 4-5 control.
            const uint32_t t = (v == kTx ? 0u : v == kRx ? 2u : 4u) + i % 2u;
            put(i, make_desc(kTablesGpa + kTableBytes * t, 32, VIRTQ_DESC_F_INDIRECT, 0));
        }
        store16(q.slot_gpa(static_cast<uint16_t>(i)), static_cast<uint16_t>(slot_head));
    }
}

void Harness::setup() {
    dev_opts_ = r_.u8();
    auto weight = [this](backend::Weight& w) {
        w.pkts = r_.u8() % 9u;
        const uint8_t b = r_.u8();
        w.bytes = b < 0x80 ? 0u : 64u * (b - 0x7Fu);
    };
    weight(opt_.tx_weight);
    weight(opt_.rx_weight);
    auto coalesce = [this](notify::CoalesceParams& c) {
        const uint8_t b = r_.u8();
        if (b >= 0x80) c = {1u + b % 8u, (b & 0x40u) != 0 ? 1'000'000u : 1u};
    };
    coalesce(opt_.tx_coalesce);
    coalesce(opt_.rx_coalesce);
    opt_.mode = (dev_opts_ & 1u) != 0 ? backend::RunMode::Poll : backend::RunMode::Event;
    port_.peek = (dev_opts_ & 8u) != 0;
    port_.max_frame = rd16(r_);

    // Guest memory as this input expects it: ring areas (as far as this or the
    // last input used them), tables, data and the adjacent page all zero.
    std::array<uint8_t, kVrings> styles{};
    for (uint16_t v = 0; v < kVrings; ++v) {
        Vring& q = v_[v];
        q.size = static_cast<uint16_t>(1u << (r_.u8() % 16u));
        q.addrs = ring::split_ring_addrs_at(GuestAddr(ring_gpa(v)), q.size);
        styles[v] = r_.u8();
        std::size_t& dirty = dirty_ring_bytes()[v];
        dirty = std::max(dirty, ring::split_ring_bytes(q.size));
        std::memset(g().at(ring_gpa(v)), 0, dirty);
        dirty = ring::split_ring_bytes(q.size);
    }
    std::memset(g().at(kTablesGpa), 0, kMainGpa + kMainBytes - kTablesGpa);
    std::memset(g().regions()[1].host, 0, kBBytes);
    // Default commands: NOTF_COAL TX_SET and RX_SET, then the ack byte.
    for (uint32_t k = 0; k < 2; ++k) {
        std::byte* p = g().at(kCmdGpa + 16u * k);
        p[0] = std::byte{virtio::VIRTIO_NET_CTRL_NOTF_COAL};
        p[1] = std::byte{static_cast<uint8_t>(k)};
        const uint32_t vals[2] = {virtio::host_to_le(4u + k), virtio::host_to_le(1'000'000u)};
        std::memcpy(p + 2, vals, sizeof vals);
    }
    // Default indirect tables: 0-1 tx, 2-3 rx, 4-5 control, 6-7 empty.
    for (uint32_t t = 0; t < 6; ++t) {
        const uint64_t tg = kTablesGpa + kTableBytes * t;
        const uint64_t data = kDataGpa + kDataStart + 0x8000u + 0x1000u * t;
        std::array<virtq_desc, 2> d{};
        if (t < 2) {
            d = {make_desc(data, kHdr, VIRTQ_DESC_F_NEXT, 1), make_desc(data + 16u, 64, 0, 0)};
        } else if (t < 4) {
            d = {make_desc(data, 1024, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1),
                 make_desc(data + 1024u, 1024, VIRTQ_DESC_F_WRITE, 0)};
        } else {
            d = {make_desc(kCmdGpa + 16u * (t - 4u), 10, VIRTQ_DESC_F_NEXT, 1),
                 make_desc(kCmdGpa + 16u * (t - 4u) + 12u, 1, VIRTQ_DESC_F_WRITE, 0)};
        }
        std::memcpy(g().at(tg), d.data(), sizeof d);
    }
    for (uint16_t v = 0; v < kVrings; ++v) write_defaults(v, styles[v]);

    const std::array<FuzzPort*, 1> ports{&port_};
    auto d = Dev::create(opt_, std::span<FuzzPort* const>(ports));
    FUZZ_CHECK(d.has_value());
    dev_ = std::move(d.value());
    configure();
}

/// Features, enabled vrings and per vring base, used.idx and avail.idx from
/// the input, then NetDevice::configure (all vrings stopped).
void Harness::configure() {
    using namespace virtio;
    const uint8_t f = r_.u8();
    const uint8_t enable = r_.u8();
    static constexpr std::array<unsigned, 7> kBits{
        VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC, VIRTIO_F_NOTIFY_ON_EMPTY,
        VIRTIO_NET_F_MRG_RXBUF,  VIRTIO_NET_F_CTRL_VQ,        VIRTIO_NET_F_NOTF_COAL,
        VIRTIO_NET_F_GUEST_TSO4};
    features_ = feature_mask(VIRTIO_F_VERSION_1);
    for (std::size_t b = 0; b < kBits.size(); ++b) {
        if ((f >> b) & 1u) features_ |= feature_mask(kBits[b]);
    }
    const bool ctrl = has_feature(features_, VIRTIO_NET_F_CTRL_VQ);
    backend::DeviceSetup s;
    s.features = features_;
    s.mem = &g().table();
    std::array<uint16_t, kVrings> used0{};
    for (uint16_t v = 0; v < kVrings; ++v) {
        Vring& q = v_[v];
        const uint8_t sel = r_.u8();
        uint16_t base = 0;
        if ((sel & 4u) == 0) {
            base = (sel & 1u) != 0 ? rd16(r_) : u16_of(0xFFFFu - r_.u8());
            used0[v] = (sel & 2u) != 0 ? rd16(r_) : u16_of(uint32_t{base} - r_.u8());
        }
        // A new ring: what it makes available is charged from nothing.
        uint32_t ahead = rd16(r_) % (q.size + 1u);
        if (ahead > budget_) ahead = 0;
        budget_ -= ahead;
        const uint16_t avail = u16_of(uint32_t{base} + ahead);
        // The driver's new ring (the device reads used.idx when it starts).
        store16(q.used_idx_gpa(), used0[v]);
        store16(q.avail_idx_gpa(), avail);
        q.exists = v != kCtrl || ctrl;
        q.started = q.exists && ((enable >> v) & 1u) == 0;
        q.base = base;
        if (!q.exists) continue;
        backend::VringSetup vs = vring_setup(v, base);
        vs.enabled = q.started;
        s.vrings.push_back(vs);
    }
    FUZZ_CHECK(dev_->configure(s).has_value());
    port_.mergeable = has_feature(features_, VIRTIO_NET_F_MRG_RXBUF);
    for (uint16_t v = 0; v < kVrings; ++v) {
        const Snap a = snap(v);
        FUZZ_CHECK(a.started == v_[v].started);
        if (a.started) FUZZ_CHECK(!a.broken && a.last == v_[v].base && a.used == used0[v]);
    }
    check_counts();
}

/// One handler (or timer) call, checked against the model.
/// which: 0 handle_tx, 1 handle_rx, 2 handle_ctrl, 3 process_tx_now,
/// 4 tx timer, 5 rx timer. Returns the chains it consumed.
uint32_t Harness::call(unsigned which) {
    std::array<Snap, kVrings> before;
    for (uint16_t v = 0; v < kVrings; ++v) before[v] = snap(v);
    const Counts cb = counts();
    const backend::CtrlQueue* cq = dev_->ctrl_queue();
    switch (which) {
        case 0:
            dev_->handle_tx();
            break;
        case 1:
            dev_->handle_rx();
            break;
        case 2:
            dev_->handle_ctrl();
            break;
        case 3:
            (void)dev_->process_tx_now();
            break;
        case 4:
            dev_->handle_tx_timer();
            break;
        default:
            dev_->handle_rx_timer();
            break;
    }
    FUZZ_CHECK(dev_->ctrl_queue() == cq);  // handlers never start or stop a vring
    const Counts ca = counts();
    over_full_ = false;
    uint32_t total = 0;
    uint64_t rx_len_sum = 0;
    for (uint16_t v = 0; v < kVrings; ++v) {
        uint64_t len_sum = 0;
        const Snap a = snap(v);
        const uint16_t n = progress(v, before[v], a, len_sum);
        // Only the handler's own vring moves.
        const uint16_t own = which == 1 ? kRx : which == 2 ? kCtrl : which <= 3 ? kTx : kVrings;
        if (v != own) FUZZ_CHECK(n == 0 && a.used == before[v].used);
        if (v == kRx) rx_len_sum = len_sum;
        total += n;
    }
    const uint32_t tx_n = which == 0 || which == 3 ? total : 0u;
    // Check 3 per call: each consumed tx chain is sent, a bad chain or a port drop.
    FUZZ_CHECK(tx_n ==
               (ca.tx_pkts - cb.tx_pkts) + (ca.tx_bad - cb.tx_bad) + (ca.tx_port - cb.tx_port));
    if (which == 1) {
        const Snap a = snap(kRx);
        if (!aliased() && a.started && !over_full_) {
            // The rx used lengths are the bytes delivered.
            if (a.broken) {
                FUZZ_CHECK(rx_len_sum <= ca.rx_bytes - cb.rx_bytes);
            } else {
                FUZZ_CHECK(rx_len_sum == ca.rx_bytes - cb.rx_bytes);
            }
        }
        // Without mergeable buffers each chain is one packet: delivered, or
        // dropped for a bad chain or for want of room.
        if (!port_.mergeable) {
            FUZZ_CHECK(total == (ca.rx_pkts - cb.rx_pkts) + (ca.rx_bad - cb.rx_bad) +
                                    (ca.rx_no_room - cb.rx_no_room));
        }
    }
    if (which == 2 && cq != nullptr) {
        // Each command is answered OK (and applied) or ERR; one run serves
        // at most kCtrlWeight.
        FUZZ_CHECK(total <= backend::kCtrlWeight);
        FUZZ_CHECK(total == (ca.ctrl_ok - cb.ctrl_ok) + (ca.ctrl_err - cb.ctrl_err));
        FUZZ_CHECK(ca.coal_updates - cb.coal_updates == ca.ctrl_ok - cb.ctrl_ok);
    } else {
        FUZZ_CHECK(ca.coal_updates == cb.coal_updates);
    }
    // The worker's handler of a vring reports its breakage (log, counter,
    // err fd, kick unwatched, NEEDS_RESET), whoever broke it (the direct
    // path included).
    const uint16_t own = which == 0 ? kTx : which == 1 ? kRx : which == 2 ? kCtrl : kVrings;
    if (own != kVrings && snap(own).broken) {
        FUZZ_CHECK(dev_->status() == virtio::VIRTIO_CONFIG_S_NEEDS_RESET);
    }
    check_counts();
    return total;
}

/// What one call did to vring `v` (snapshots before and after); returns the
/// chains consumed, and the sum of the used lengths published.
uint16_t Harness::progress(uint16_t v, const Snap& b, const Snap& a, uint64_t& len_sum) {
    Vring& q = v_[v];
    FUZZ_CHECK(a.started == b.started && a.started == q.started);
    if (!b.started) return 0;
    if (b.broken) {
        // Broken is sticky, and nothing moves on a broken ring.
        FUZZ_CHECK(a.broken && a.last == b.last && a.used == b.used);
        return 0;
    }
    const uint16_t consumed = u16_of(uint32_t{a.last} - b.last);
    const uint16_t used = u16_of(uint32_t{a.used} - b.used);
    // A call pops up to the device's shadow of avail.idx (at most `size` past
    // last_avail_idx; a device that gave chains back keeps it), then, when
    // it reads avail.idx again at the shadow, up to avail.idx if that is
    // within `size` of the shadow (vhost_get_vq_desc checks the same way).
    if (!aliased()) {
        const uint16_t ahead = pending_of(b.last, load16(q.avail_idx_gpa()), q.size);
        FUZZ_CHECK(consumed <= std::max(q.size, ahead));
    }
    FUZZ_CHECK(used <= consumed);
    if (a.broken) {
        broke_since_reset_ = true;
    } else {
        FUZZ_CHECK(used == consumed);  // nothing stays in flight between calls
    }
    q.consumed += consumed;
    if (aliased()) return consumed;
    FUZZ_CHECK(load16(q.used_idx_gpa()) == a.used);
    // More used entries than the ring holds (after the driver made more than
    // `size` available, see above): the first ones are overwritten already.
    if (used > q.size) {
        over_full_ = true;
        return consumed;
    }
    // The used entries are the consumed heads, each once.
    static std::array<uint16_t, virtio::kMaxQueueSize> count{};
    for (uint16_t i = 0; i < consumed; ++i) {
        const uint16_t head = load16(q.slot_gpa(u16_of(uint32_t{b.last} + i)));
        FUZZ_CHECK(head < q.size);
        ++count[head];
    }
    for (uint16_t j = 0; j < used; ++j) {
        virtio::virtq_used_elem e;
        std::memcpy(&e, g().at(q.used_elem_gpa(u16_of(uint32_t{b.used} + j))), sizeof e);
        const uint32_t id = e.id.get();
        const uint32_t len = e.len.get();
        FUZZ_CHECK(id < q.size && count[id] > 0);
        --count[id];
        if (v == kTx) FUZZ_CHECK(len == 0);
        if (v == kCtrl) FUZZ_CHECK(len <= 1);
        len_sum += len;
    }
    for (uint16_t i = 0; i < consumed; ++i) {
        const uint16_t head = load16(q.slot_gpa(u16_of(uint32_t{b.last} + i)));
        if (!a.broken) FUZZ_CHECK(count[head] == 0);
        count[head] = 0;
    }
    return consumed;
}

void Harness::stop(uint16_t v) {
    Vring& q = v_[v];
    if (!q.started) return;
    const Snap b = snap(v);
    auto base = dev_->stop_vring(v);
    // GET_VRING_BASE: where the queue stood; nothing is in flight.
    FUZZ_CHECK(base.has_value() && base.value().last_avail_idx == b.last);
    FUZZ_CHECK(!dev_->vring_started(v));
    q.started = false;
    q.base = b.last;
}

void Harness::start(uint16_t v, uint8_t sel) {
    Vring& q = v_[v];
    if (q.started || !q.exists) return;
    uint16_t base = q.base;
    // SET_VRING_BASE elsewhere than the reported base: the frontend skips or
    // replays chains (the device must take any value).
    if ((sel & 1u) != 0) {
        const uint16_t other = (sel & 2u) != 0 ? rd16(r_) : u16_of(uint32_t{base} + r_.u8() - 128u);
        if (charge(v, q.base, other, load16(q.avail_idx_gpa()))) base = other;
    }
    FUZZ_CHECK(dev_->set_vring(v, vring_setup(v, base)).has_value());
    FUZZ_CHECK(dev_->start_vring(v).has_value());
    q.started = true;
    q.base = base;
    const Snap a = snap(v);
    // The queue starts at the base and at used.idx as the ring holds it.
    FUZZ_CHECK(a.started && !a.broken && a.last == base && a.used == load16(q.used_idx_gpa()));
}

/// A descriptor from the input, its address biased to region edges, the
/// rings themselves and the indirect tables.
virtq_desc Harness::decode_desc() {
    uint64_t addr = 0;
    switch (r_.u8() % 12) {
        case 0:
        case 1:
        case 2:
            addr = kDataGpa + 2u * uint64_t{rd16(r_)};
            break;  // may run into B
        case 3:
            addr = kBGpa - 1u - r_.u8();
            break;  // crosses main -> B
        case 4:
            addr = kBGpa + rd16(r_) % kBBytes;
            break;
        case 5:
            addr = kCGpa + rd16(r_) % kCBytes;
            break;  // read-only
        case 6: {   // just before a hole: below main, after B, after C
            static constexpr std::array<uint64_t, 3> kEnds{kMainGpa, kBGpa + kBBytes,
                                                           kCGpa + kCBytes};
            const uint8_t w = r_.u8();
            addr = kEnds[w % 3u] - 1u - r_.u8() + ((w & 0x80u) != 0 ? 0x100u : 0u);
            break;
        }
        case 7: {  // the ring memory itself
            const uint16_t w = pick_vring();
            addr = ring_gpa(w) + rd16(r_) % ring::split_ring_bytes(v_[w].size);
            break;
        }
        case 8: {  // an indirect table, or an entry inside one
            const uint8_t t = r_.u8();
            addr = kTablesGpa + kTableBytes * (t % kTables) + 16u * (r_.u8() % 4u);
            break;
        }
        case 9:
            addr = UINT64_MAX - rd16(r_);
            break;
        case 10:
            addr = kCmdGpa + 16u * (r_.u8() % 2u);
            break;
        default:
            addr = rd64(r_);
            break;
    }
    uint32_t len = 0;
    switch (r_.u8() % 8) {
        case 0:
            len = 0;
            break;
        case 1:
            len = 1u + r_.u8() % 64u;
            break;
        case 2:
            len = rd16(r_);
            break;
        case 3:
            len = rd32(r_);
            break;
        case 4:
            len = 16u * r_.u8();
            break;  // indirect table lengths
        case 5:
            len = UINT32_MAX - r_.u8();
            break;
        case 6:
            len = kHdr + r_.u8();
            break;
        default:
            len = (r_.u8() & 1u) != 0 ? 10u : 1u;
            break;  // a command, an ack
    }
    const uint8_t f = r_.u8();
    // NEXT / WRITE / INDIRECT; a set top bit adds a flag no spec defines.
    const auto flags = static_cast<uint16_t>((f & 7u) | ((f & 0x80u) != 0 ? 0x8000u : 0u));
    uint16_t next = r_.u8();
    if (next == 0xFF) next = rd16(r_);
    const virtq_desc d = make_desc(addr, len, flags, next);
    note_desc(d);
    return d;
}

uint64_t Harness::alloc(uint32_t len) {
    const uint32_t rounded = (len + 15u) & ~15u;
    if (cursor_ + rounded > kDataBytes) cursor_ = kDataStart;
    const uint64_t gpa = kDataGpa + cursor_;
    cursor_ += rounded;
    return gpa;
}

/// A well-formed chain for the vring's role (with an occasional defect),
/// direct or indirect, made available at once.
void Harness::add_chain() {
    const uint16_t v = pick_vring();
    const Vring& q = v_[v];
    const uint8_t shape = r_.u8();
    const auto head = static_cast<uint16_t>(rd16(r_) & q.mask());
    const bool indirect = (shape & 0x10u) != 0;
    const bool defect = (shape & 0x20u) != 0 && (shape & 0x0Cu) == 0;
    const bool edge = (shape & 0x40u) != 0;
    const uint32_t cap = indirect ? std::min<uint32_t>(q.size, kTableEntries) : q.size;
    uint32_t n = std::min<uint32_t>(1u + shape % 4u, cap);
    std::array<uint32_t, 4> lens{};
    std::array<uint16_t, 4> flags{};
    std::array<uint8_t, 16> cmd{};
    uint32_t cmd_len = 0;
    if (v == kTx) {
        uint32_t total = 0;
        switch (r_.u8() % 6) {
            case 0:
                total = kHdr + r_.u8();
                break;
            case 1:
                total = kHdr + rd16(r_) % 1519u;
                break;
            case 2:
                total = 1u + r_.u8() % kHdr;
                break;  // short: a bad chain
            case 3:
                total = kHdr + 1514u;
                break;
            case 4:
                total = kHdr + 0xFFFFu - r_.u8();
                break;
            default:
                total = kHdr;
                break;
        }
        n = std::min(n, total);
        for (uint32_t i = 0; i < n; ++i) lens[i] = total / n + (i + 1 == n ? total % n : 0u);
        if (defect) flags[n - 1] = VIRTQ_DESC_F_WRITE;
    } else if (v == kRx) {
        for (uint32_t i = 0; i < n; ++i) {
            switch (r_.u8() % 4) {
                case 0:
                    lens[i] = 1u + r_.u8() % 16u;
                    break;
                case 1:
                    lens[i] = kHdr + r_.u8();
                    break;
                case 2:
                    lens[i] = 64u + rd16(r_) % 2048u;
                    break;
                default:
                    lens[i] = kHdr + 1514u;
                    break;
            }
            flags[i] = VIRTQ_DESC_F_WRITE;
        }
        if (defect) flags[0] = 0;
    } else {
        // The readable command (hdr, data), then a one-byte ack.
        cmd[0] = r_.u8() < 0xE0 ? virtio::VIRTIO_NET_CTRL_NOTF_COAL : r_.u8();
        cmd[1] = static_cast<uint8_t>(r_.u8() % 3u);
        const std::array<uint32_t, 2> vals{virtio::host_to_le(biased_u32(r_)),
                                           virtio::host_to_le(biased_u32(r_))};
        std::memcpy(cmd.data() + 2, vals.data(), sizeof vals);
        cmd_len = (shape & 0x80u) != 0 ? 1u + r_.u8() % 15u : 10u;
        const uint32_t readable = std::min(n > 1 ? n - 1 : 1u, cmd_len);
        n = std::min(readable + 1u, cap);
        for (uint32_t i = 0; i + 1 < n; ++i) {
            lens[i] = cmd_len / readable + (i + 2 == n ? cmd_len % readable : 0u);
        }
        lens[n - 1] = 1;
        flags[n - 1] = static_cast<uint16_t>(defect ? 0u : VIRTQ_DESC_F_WRITE);
    }
    std::array<virtq_desc, 4> d{};
    uint32_t cmd_off = 0;
    for (uint32_t i = 0; i < n; ++i) {
        uint64_t gpa = alloc(lens[i]);
        if (edge && i + 1 == n && v != kCtrl && lens[i] >= 2 && lens[i] - lens[i] / 2 <= kBBytes) {
            gpa = kBGpa - lens[i] / 2;  // crosses into the adjacent region
        }
        if (v == kCtrl && i + 1 < n) {
            std::memcpy(g().at(gpa), cmd.data() + cmd_off, lens[i]);
            cmd_off += lens[i];
        }
        const auto nf = static_cast<uint16_t>(i + 1 < n ? VIRTQ_DESC_F_NEXT : 0);
        const uint16_t next = indirect ? static_cast<uint16_t>(i + 1)
                                       : static_cast<uint16_t>((head + i + 1) & q.mask());
        d[i] = make_desc(gpa, lens[i], static_cast<uint16_t>(flags[i] | nf), next);
    }
    if (indirect) {
        const uint64_t table = kTablesGpa + kTableBytes * (r_.u8() % kTables);
        std::memcpy(g().at(table), d.data(), 16u * n);
        const virtq_desc ind = make_desc(table, 16u * n, VIRTQ_DESC_F_INDIRECT, 0);
        std::memcpy(g().at(q.addrs.desc.value + 16u * head), &ind, sizeof ind);
    } else {
        for (uint32_t i = 0; i < n; ++i) {
            std::memcpy(g().at(q.addrs.desc.value + 16u * ((head + i) & q.mask())), &d[i],
                        sizeof d[i]);
        }
    }
    const uint16_t avail = load16(q.avail_idx_gpa());
    store16(q.slot_gpa(avail), head);
    (void)set_avail(v, u16_of(uint32_t{avail} + 1u));
}

void Harness::poke() {
    switch (r_.u8() % 5) {
        case 0: {
            const uint16_t v = pick_vring();
            const auto i = static_cast<uint16_t>(rd16(r_) & v_[v].mask());
            const virtq_desc d = decode_desc();
            std::memcpy(g().at(v_[v].addrs.desc.value + 16u * i), &d, sizeof d);
            break;
        }
        case 1: {
            const uint8_t t = r_.u8();
            const uint64_t gpa = kTablesGpa + kTableBytes * (t % kTables) + 16u * r_.u8();
            const virtq_desc d = decode_desc();
            std::memcpy(g().at(gpa), &d, sizeof d);
            break;
        }
        case 2: {
            const uint16_t v = pick_vring();
            const uint16_t slot = rd16(r_);
            const uint16_t head =
                r_.u8() < 0xE0 ? static_cast<uint16_t>(rd16(r_) & v_[v].mask()) : rd16(r_);
            store16(v_[v].slot_gpa(slot), head);
            break;
        }
        default:
            add_chain();
            break;
    }
}

void Harness::op() {
    switch (r_.u8() % 22) {
        case 0:
            (void)call(0);
            break;
        case 1:
            (void)call(1);
            break;
        case 2:
            (void)call(2);
            break;
        case 3:
            (void)call(3);
            break;
        case 4:
            (void)call(4u + (r_.u8() & 1u));
            break;
        case 5:  // a worker round: tx, rx, control
            (void)call(0);
            (void)call(1);
            (void)call(2);
            break;
        case 6: {  // publish n
            const uint16_t v = pick_vring();
            (void)set_avail(v, u16_of(uint32_t{load16(v_[v].avail_idx_gpa())} + r_.u8()));
            break;
        }
        case 7: {  // avail.idx jumps: anywhere, or past the queue size
            const uint16_t v = pick_vring();
            const uint8_t sel = r_.u8();
            const uint16_t to = (sel & 1u) != 0
                                    ? rd16(r_)
                                    : u16_of(uint32_t{last_avail(v)} + v_[v].size + 1u + r_.u8());
            (void)set_avail(v, to);
            break;
        }
        case 8:
        case 9:
        case 10:
        case 11:
        case 12:
            poke();
            break;
        case 13: {  // avail.flags (NO_INTERRUPT and junk) or used_event
            const Vring& q = v_[pick_vring()];
            if ((r_.u8() & 1u) != 0) {
                store16(q.addrs.avail.value + Layout::avail_flags_off(),
                        static_cast<uint16_t>(r_.u8() < 0x80 ? 0u
                                                             : virtio::VIRTQ_AVAIL_F_NO_INTERRUPT));
            } else {
                store16(q.addrs.avail.value + Layout::used_event_off(q.size), rd16(r_));
            }
            break;
        }
        case 14: {  // frames arrive at the port
            for (unsigned n = 1u + r_.u8() % 16u; n > 0 && port_.tail < kPortFrames; --n) {
                port_.frames[port_.tail++] = frame_len(r_, port_.max_frame);
            }
            break;
        }
        case 15: {  // port mode: peek or not, the send script
            const uint8_t b = r_.u8();
            port_.peek = (b & 1u) != 0;
            port_.script_len = (b >> 1) % 9u;
            const uint16_t bits = rd16(r_);
            static constexpr std::array<SendResult, 4> kAnswers{
                SendResult::Sent, SendResult::Sent, SendResult::Dropped, SendResult::Retry};
            for (uint32_t i = 0; i < 8; ++i) port_.script[i] = kAnswers[(bits >> (2u * i)) & 3u];
            port_.script_pos = 0;
            break;
        }
        case 16:
            stop(pick_vring());
            break;
        case 17: {
            const uint16_t v = pick_vring();
            start(v, r_.u8());
            break;
        }
        case 18:
        case 19: {  // GET_VRING_BASE, then SET_VRING_BASE and start
            const uint16_t v = pick_vring();
            stop(v);
            start(v, r_.u8());
            break;
        }
        case 20: {  // the driver resets the device and sets it up again
            dev_->reset();
            for (uint16_t v = 0; v < kVrings; ++v) {
                FUZZ_CHECK(!dev_->vring_started(v));
                v_[v].started = false;
            }
            FUZZ_CHECK(dev_->status() == 0);
            broke_since_reset_ = false;
            configure();
            break;
        }
        default:
            (void)call(r_.u8() % 3u);
            break;
    }
}

/// After the ops: the frontend restarts stopped vrings, the port accepts
/// everything and floods rx, the handlers run until nothing moves; then
/// check 1 on every vring.
void Harness::drain() {
    for (uint16_t v = 0; v < kVrings; ++v) start(v, 0);
    port_.drain = true;
    // Each pass that moves nothing ends the drain; each that moves something
    // consumes a chain of what was available when the drain began (at most
    // twice each queue size, see pending_of): more passes would be a livelock.
    uint32_t bound = 2;
    for (const Vring& q : v_) bound += 2u * q.size;
    for (uint32_t pass = 0;; ++pass) {
        if (pass > bound) {
            FUZZ_CHECK(aliased());  // the device's own writes may have moved avail.idx
            break;
        }
        const uint32_t n = call(0) + call(1) + call(2);
        if (n == 0) break;
    }
    bool any_broken = false;
    for (uint16_t v = 0; v < kVrings; ++v) {
        const Snap s = snap(v);
        if (!s.started) continue;
        any_broken = any_broken || s.broken;
        if (s.broken || aliased()) continue;
        // Check 1: every chain made available was consumed (and, per call,
        // used once).
        FUZZ_CHECK(load16(v_[v].avail_idx_gpa()) == s.last);
        FUZZ_CHECK(load16(v_[v].used_idx_gpa()) == s.used);
    }
    // A broken vring is reported: DEVICE_NEEDS_RESET.
    if (any_broken) FUZZ_CHECK(dev_->status() == virtio::VIRTIO_CONFIG_S_NEEDS_RESET);
    check_counts();
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pvnet::fuzz::Reader r(data, size);
    pvnet::fuzz::Harness h(r);
    h.setup();
    h.pokes();
    h.run_ops();
    h.drain();
    return 0;
}
