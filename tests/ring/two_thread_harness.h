// Two-thread harness for one split virtqueue (used by split_two_thread_test.cc):
// one MemoryRegion holding ring, indirect tables and data; a SplitDriverQueue
// and a SplitDeviceQueue on it; EventFd kick (driver -> device) and call
// (device -> driver). Device and Driver run the real datapath loops - bursts,
// one notify decision per burst, re-arm with recheck, then a bounded sleep -
// check every byte that crosses the ring, and report the first failure,
// including a LOST WAKEUP: a sleeper that times out while the peer has
// published work for it.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::ring::two_thread {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Layout of the shared region (guest-physical, base 0x10000).
// ---------------------------------------------------------------------------
inline constexpr uint64_t kGuestBase = 0x10000;
inline constexpr uint16_t kRingSize = 256;
inline constexpr uint64_t kRingOff = 0;
inline constexpr uint16_t kIndirectMax = 4;
inline constexpr uint64_t kIndirectOff = 0x2000;
inline constexpr uint64_t kDataOff = 0x8000;
inline constexpr uint32_t kReqBytes = 64;   // device-readable part (16-byte "header" + 48)
inline constexpr uint32_t kReqHdrBytes = 16;
inline constexpr uint32_t kRespBytes = 64;  // device-writable part
inline constexpr uint64_t kSlotBytes = kReqBytes + kRespBytes;
// Twice the ring size: at most kRingSize chains are in flight, so the data
// slot of buffer `seq` (seq % kDataSlots) was reaped before it is refilled,
// even when add() then refuses for lack of descriptors.
inline constexpr uint64_t kDataSlots = 2u * kRingSize;
inline constexpr std::size_t kRegionBytes = kDataOff + kDataSlots * kSlotBytes;
inline constexpr uint8_t kPoison = 0xA5;

static_assert(split_ring_bytes(kRingSize) <= kIndirectOff - kRingOff);
static_assert(kIndirectOff + uint64_t{kRingSize} * kIndirectMax * 16u <= kDataOff);

inline constexpr uint32_t kBurst = 32;  // driver adds / device pops per notify decision
inline constexpr int kPollMs = 2000;    // one sleep; a timeout with work published is a lost wakeup
inline constexpr int64_t kPollUs = int64_t{kPollMs} * 1000;  // EventFd::wait takes microseconds
inline constexpr auto kDeadline = std::chrono::seconds(120);

// ---------------------------------------------------------------------------
// Payload patterns: the request is a function of the sequence number, the
// response a function of the request bytes the device actually read.
// ---------------------------------------------------------------------------
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

inline void make_request(uint64_t seq, uint8_t (&req)[kReqBytes]) {
    const uint64_t k = splitmix64(seq);
    for (uint32_t w = 0; w < kReqBytes / 8; ++w) {
        const uint64_t word = k + w * 0x9E3779B97F4A7C15ull;
        std::memcpy(req + 8 * w, &word, 8);
    }
}

inline uint32_t response_len(const uint8_t (&req)[kReqBytes]) { return 1u + (req[0] & 63u); }

inline uint8_t response_byte(const uint8_t (&req)[kReqBytes], uint32_t i) {
    return static_cast<uint8_t>(~req[i] ^ static_cast<uint8_t>(i * 29u + 7u));
}

// ---------------------------------------------------------------------------
// Plumbing: a failure slot both threads can fill.
// ---------------------------------------------------------------------------
class Failure {
public:
    void set(const std::string& what) {
        std::lock_guard<std::mutex> lock(mu_);
        if (msg_.empty()) msg_ = what;
        failed_.store(true, std::memory_order_release);
    }
    bool failed() const { return failed_.load(std::memory_order_acquire); }
    std::string message() {
        std::lock_guard<std::mutex> lock(mu_);
        return msg_;
    }

private:
    std::atomic<bool> failed_{false};
    std::mutex mu_;
    std::string msg_;
};

[[gnu::format(printf, 1, 2)]] inline std::string fmt(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

inline std::string why(RingError e) {
    const std::string_view v = to_string(e);
    return std::string(v.begin(), v.end());
}

/// Small random delays that shift the two threads' windows against each other.
class Jitter {
public:
    explicit Jitter(uint64_t seed, uint32_t max_spins) : s_(seed | 1u), max_(max_spins) {}
    /// A random number in [0, max_spins).
    uint64_t next() {
        if (max_ == 0) return 0;
        s_ ^= s_ << 13;
        s_ ^= s_ >> 7;
        s_ ^= s_ << 17;
        return s_ % max_;
    }
    /// Spins that many times.
    void operator()() {
        const uint64_t n = next();
        for (uint64_t i = 0; i < n; ++i) {
            asm volatile("" ::: "memory");
        }
    }

private:
    uint64_t s_;
    uint32_t max_;
};

// ---------------------------------------------------------------------------
// The shared ring: one region, one memory table, both queues.
// ---------------------------------------------------------------------------
struct Params {
    bool event_idx;
    bool indirect;
};

inline void PrintTo(const Params& p, std::ostream* os) {
    *os << "{event_idx=" << p.event_idx << ", indirect=" << p.indirect << "}";
}

class SharedRing {
public:
    explicit SharedRing(Params p) : params_(p) {}

    /// Builds region, table and queues; an empty string means success.
    std::string setup() {
        auto r = mem::MemoryRegion::create(kRegionBytes, "pvnet-two-thread");
        if (!r) return "MemoryRegion::create failed";
        region_ = std::make_unique<mem::MemoryRegion>(std::move(*r));
        if (!table_.add(mem::GuestAddr(kGuestBase), region_->bytes())) return "table.add failed";

        const SplitRingAddrs addrs = split_ring_addrs_at(gpa(kRingOff), kRingSize);
        DriverQueueConfig dc;
        dc.addrs = addrs;
        dc.event_idx = params_.event_idx;
        dc.indirect = params_.indirect;
        dc.indirect_max = kIndirectMax;
        dc.indirect_area = gpa(kIndirectOff);
        auto d = SplitDriverQueue::create(table_, dc);
        if (!d) return "SplitDriverQueue::create failed";
        driver_ = std::move(*d);

        DeviceQueueConfig vc;
        vc.addrs = addrs;
        vc.features =
            (params_.event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0) |
            (params_.indirect ? virtio::feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC) : 0);
        auto v = SplitDeviceQueue::create(table_, vc);
        if (!v) return "SplitDeviceQueue::create failed";
        device_ = std::move(*v);

        auto kick = notify::EventFd::create();
        auto call = notify::EventFd::create();
        if (!kick || !call) return "EventFd::create failed";
        kick_.emplace(std::move(*kick));
        call_.emplace(std::move(*call));
        return {};
    }

    static mem::GuestAddr gpa(uint64_t off) { return mem::GuestAddr(kGuestBase + off); }
    static uint64_t slot_off(uint64_t seq) { return kDataOff + (seq % kDataSlots) * kSlotBytes; }
    uint8_t* host(uint64_t off) const {
        return static_cast<uint8_t*>(static_cast<void*>(region_->host())) + off;
    }

    Params params_;
    std::unique_ptr<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::unique_ptr<SplitDriverQueue> driver_;
    std::unique_ptr<SplitDeviceQueue> device_;
    std::optional<notify::EventFd> kick_;  // driver -> device
    std::optional<notify::EventFd> call_;  // device -> driver
    Failure failure_;
    Clock::time_point deadline_ = Clock::now() + kDeadline;
};

// ---------------------------------------------------------------------------
// Device side.
// ---------------------------------------------------------------------------
struct DeviceCounts {
    uint64_t buffers = 0;
    uint64_t interrupts = 0;  ///< writes to the call eventfd
    uint64_t sleeps = 0;      ///< polls on the kick eventfd
    uint64_t rechecks = 0;    ///< enable_notify() found buffers: no sleep
    uint64_t idle_timeouts = 0;
};

class Device {
public:
    Device(SharedRing& s, uint64_t total, uint32_t jitter_spins)
        : s_(s), q_(*s.device_), total_(total), chain_(std::make_unique<DescChain>()),
          jitter_(0xD1CE, jitter_spins) {}

    /// The device loop: pop bursts with notifications off, push, flush once
    /// per burst, interrupt only when should_signal(); when the ring is
    /// empty re-arm (race-free recheck) and sleep on the kick fd.
    void run() {
        q_.disable_notify();
        while (c_.buffers < total_) {
            if (s_.failure_.failed()) return;
            if (Clock::now() > s_.deadline_) {
                fail("device: overall deadline passed");
                return;
            }
            uint32_t n = 0;
            PopStatus st = PopStatus::Ok;
            while (n < kBurst && c_.buffers < total_) {
                st = q_.pop(*chain_);
                if (st != PopStatus::Ok) break;
                if (!serve()) return;
                ++n;
            }
            q_.flush_used();
            if (n > 0 && q_.should_signal()) signal_call();
            if (st == PopStatus::Broken || q_.broken()) return fail_broken();
            if (st != PopStatus::Empty) continue;  // burst full (or done): keep going
            if (!idle()) return;
        }
    }

    /// Ring empty: re-arm kicks; sleep unless buffers arrived in the window.
    /// False when the test must stop.
    bool idle() {
        jitter_();
        if (q_.enable_notify()) {
            ++c_.rechecks;
            q_.disable_notify();
            return true;
        }
        if (q_.broken()) return fail_broken(), false;
        ++c_.sleeps;
        while (!s_.kick_->wait(kPollUs)) {
            if (s_.failure_.failed()) return false;
            // Timed out. Lost only if the driver really published since we armed.
            if (const uint16_t p = q_.pending(); p > 0) {
                return fail(fmt("device: LOST WAKEUP (kick): slept %d ms with %u buffers "
                                "available after %" PRIu64 " buffers",
                                kPollMs, unsigned{p}, c_.buffers)),
                       false;
            }
            if (Clock::now() > s_.deadline_) return fail("device: deadline while asleep"), false;
            ++c_.idle_timeouts;
        }
        s_.kick_->consume();
        q_.disable_notify();
        return true;
    }

    /// Checks every readable byte, writes the response, stages the used entry.
    bool serve() {
        const DescChain& ch = *chain_;
        if (ch.out_bytes != kReqBytes || ch.in_bytes != kRespBytes) {
            return fail(fmt("device: buffer %" PRIu64 " has %u readable / %u writable bytes",
                            c_.buffers, ch.out_bytes, ch.in_bytes));
        }
        uint8_t req[kReqBytes];
        uint32_t off = 0;
        for (const iovec& v : ch.readable()) {
            std::memcpy(req + off, v.iov_base, v.iov_len);
            off += static_cast<uint32_t>(v.iov_len);
        }
        uint8_t want[kReqBytes];
        make_request(c_.buffers, want);
        if (std::memcmp(req, want, kReqBytes) != 0) {
            uint32_t i = 0;
            while (req[i] == want[i]) ++i;
            return fail(fmt("device: buffer %" PRIu64 " byte %u is %02x, want %02x", c_.buffers,
                            i, unsigned{req[i]}, unsigned{want[i]}));
        }
        const uint32_t len = response_len(req);
        uint32_t done = 0;
        for (const iovec& v : ch.writable()) {
            auto* dst = static_cast<uint8_t*>(v.iov_base);
            for (std::size_t k = 0; k < v.iov_len && done < len; ++k) {
                dst[k] = response_byte(req, done++);
            }
        }
        if (auto st = q_.add_used(ch.head, len); !st) {
            return fail(fmt("device: add_used(%u, %u) refused", unsigned{ch.head}, len));
        }
        ++c_.buffers;
        return true;
    }

    void signal_call() {
        s_.call_->signal();
        ++c_.interrupts;
    }

    bool fail(const std::string& what) {
        s_.failure_.set(what);
        s_.call_->signal();  // wake the driver so it sees the failure now
        return false;
    }
    void fail_broken() { fail("device: queue broken: " + why(q_.broken_reason())); }

    const DeviceCounts& counts() const { return c_; }
    SplitDeviceQueue& queue() { return q_; }
    DescChain& chain() { return *chain_; }

private:
    SharedRing& s_;
    SplitDeviceQueue& q_;
    uint64_t total_;
    std::unique_ptr<DescChain> chain_;
    Jitter jitter_;
    DeviceCounts c_;
};

// ---------------------------------------------------------------------------
// Driver side.
// ---------------------------------------------------------------------------
struct DriverCounts {
    uint64_t added = 0;
    uint64_t reaped = 0;
    uint64_t kicks = 0;   ///< writes to the kick eventfd
    uint64_t sleeps = 0;  ///< polls on the call eventfd
    uint64_t rechecks = 0;
    uint64_t idle_timeouts = 0;
};

class Driver {
public:
    Driver(SharedRing& s, uint64_t total, uint64_t max_in_flight, uint32_t jitter_spins)
        : s_(s), q_(*s.driver_), total_(total), max_in_flight_(max_in_flight),
          jitter_(0xD21E, jitter_spins) {}

    void run() {
        q_.disable_cb();  // polling until there is nothing to do
        while (c_.reaped < total_) {
            if (s_.failure_.failed()) return;
            if (Clock::now() > s_.deadline_) {
                fail("driver: overall deadline passed");
                return;
            }
            const uint32_t added = add_burst();
            if (s_.failure_.failed()) return;
            const uint64_t reaped = reap();
            if (s_.failure_.failed()) return;
            if (added > 0 || reaped > 0) continue;
            // No free descriptors (or all added) and nothing used: wait for a call.
            if (!idle()) return;
        }
    }

    /// Adds up to kBurst chains and publishes them with one kick decision.
    uint32_t add_burst() {
        uint32_t n = 0;
        while (n < kBurst && c_.added < total_ && c_.added - c_.reaped < max_in_flight_) {
            const uint64_t seq = c_.added;
            const uint64_t off = SharedRing::slot_off(seq);
            uint8_t req[kReqBytes];
            make_request(seq, req);
            std::memcpy(s_.host(off), req, kReqBytes);
            std::memset(s_.host(off + kReqBytes), kPoison, kRespBytes);
            const Buf out[2] = {{SharedRing::gpa(off), kReqHdrBytes},
                                {SharedRing::gpa(off + kReqHdrBytes), kReqBytes - kReqHdrBytes}};
            const Buf in[1] = {{SharedRing::gpa(off + kReqBytes), kRespBytes}};
            const AddStatus st = q_.add(out, in, seq);
            if (st == AddStatus::NoSpace) break;
            if (st == AddStatus::Broken) return fail_broken(), n;
            ++c_.added;
            ++n;
        }
        if (n > 0 && q_.kick_prepare()) {
            s_.kick_->signal();
            ++c_.kicks;
        }
        return n;
    }

    /// Reaps every used entry: tokens in order, used len and every byte checked.
    uint64_t reap() {
        uint64_t n = 0;
        UsedBuf u;
        while (q_.get_used(u)) {
            const uint64_t seq = c_.reaped;
            if (u.token != seq) {
                return fail(fmt("driver: token %" PRIu64 " came back, want %" PRIu64, u.token,
                                seq)),
                       n;
            }
            uint8_t req[kReqBytes];
            make_request(seq, req);
            const uint32_t len = response_len(req);
            if (u.len != len) {
                return fail(fmt("driver: buffer %" PRIu64 " used len %u, want %u", seq, u.len,
                                len)),
                       n;
            }
            const uint8_t* resp = s_.host(SharedRing::slot_off(seq) + kReqBytes);
            for (uint32_t i = 0; i < kRespBytes; ++i) {
                const uint8_t want = i < len ? response_byte(req, i) : kPoison;
                if (resp[i] != want) {
                    return fail(fmt("driver: buffer %" PRIu64 " response byte %u is %02x, "
                                    "want %02x",
                                    seq, i, unsigned{resp[i]}, unsigned{want})),
                           n;
                }
            }
            ++c_.reaped;
            ++n;
        }
        if (q_.broken()) fail_broken();
        return n;
    }

    /// Re-arms interrupts (race-free: enable_cb re-checks used.idx) and sleeps.
    bool idle() {
        jitter_();
        if (!q_.enable_cb()) {
            ++c_.rechecks;
            q_.disable_cb();
            return true;
        }
        ++c_.sleeps;
        while (!s_.call_->wait(kPollUs)) {
            if (s_.failure_.failed()) return false;
            // Timed out. Lost only if the device really published used entries.
            if (q_.poll(q_.last_used_idx())) {
                return fail(fmt("driver: LOST WAKEUP (interrupt): slept %d ms with used "
                                "entries pending after %" PRIu64 " buffers",
                                kPollMs, c_.reaped)),
                       false;
            }
            if (Clock::now() > s_.deadline_) return fail("driver: deadline while asleep"), false;
            ++c_.idle_timeouts;
        }
        s_.call_->consume();
        q_.disable_cb();
        return true;
    }

    bool fail(const std::string& what) {
        s_.failure_.set(what);
        s_.kick_->signal();  // wake the device so it sees the failure now
        return false;
    }
    void fail_broken() { fail("driver: queue broken: " + why(q_.broken_reason())); }

    const DriverCounts& counts() const { return c_; }

private:
    SharedRing& s_;
    SplitDriverQueue& q_;
    uint64_t total_;
    uint64_t max_in_flight_;
    Jitter jitter_;
    DriverCounts c_;
};

}  // namespace pvnet::ring::two_thread
