// Open-loop request generation without coordinated omission: request k is
// planned at start + k / rate whatever happened to the earlier ones. A
// request that cannot leave at its planned time (an earlier one is still
// outstanding, no credit, no buffer) waits in the backlog and leaves as soon
// as it can; its latency counts from the planned time, so the wait is in the
// figure instead of silently thinning the load (Gil Tene's "coordinated
// omission"; wrk2's and HdrHistogram's correction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pvnet::bench {

class OpenLoopSchedule {
public:
    /// `rate_per_s` > 0 requests per second, the first planned at `start_ns`.
    OpenLoopSchedule(uint64_t rate_per_s, uint64_t start_ns) noexcept
        : rate_(rate_per_s), start_(start_ns) {}

    /// Planned send time of request k.
    uint64_t planned(uint64_t k) const noexcept {
        // Whole seconds and the remainder apart: no rounding drift, and no
        // overflow of k * 1e9.
        return start_ + k / rate_ * kNsPerS + k % rate_ * kNsPerS / rate_;
    }
    /// The oldest request not sent yet (its index).
    uint64_t next() const noexcept { return sent_; }
    /// Whether request next() is due at `now`.
    bool due(uint64_t now) const noexcept { return planned(sent_) <= now; }
    /// Requests due at `now` and not sent yet.
    uint64_t backlog(uint64_t now) const noexcept {
        if (now < start_) return 0;
        const uint64_t d = now - start_;
        const uint64_t due_count = d / kNsPerS * rate_ + d % kNsPerS * rate_ / kNsPerS + 1;
        return due_count > sent_ ? due_count - sent_ : 0;
    }
    /// Request next() has left; returns its planned time.
    uint64_t take() noexcept { return planned(sent_++); }
    uint64_t rate() const noexcept { return rate_; }

private:
    static constexpr uint64_t kNsPerS = 1'000'000'000;
    uint64_t rate_;
    uint64_t start_;
    uint64_t sent_ = 0;
};

/// The planned (or actual, in a closed loop) send time of each outstanding
/// request of one flow, by sequence number: many may be outstanding at once.
/// A response names its request by sequence number; one that names no
/// outstanding request (a duplicate, a stale or a forged one) is refused.
class OutstandingRequests {
public:
    /// At most `capacity` (a power of two) outstanding at once.
    explicit OutstandingRequests(uint32_t capacity)
        : mask_(capacity - 1), at_(capacity, 0), live_(capacity, 0) {}

    bool full() const noexcept { return count_ == mask_ + 1; }
    uint32_t count() const noexcept { return count_; }
    /// Requests given up on: still unanswered when their slot came round
    /// again `capacity` requests later (a lost request or response).
    uint64_t abandoned() const noexcept { return abandoned_; }
    /// Request `seq` left at (or was planned for) `t_ns`. Sequence numbers
    /// go up by one per request: the slot's previous owner is `capacity`
    /// requests older.
    void add(uint64_t seq, uint64_t t_ns) noexcept {
        const std::size_t i = seq & mask_;
        if (live_[i]) {
            ++abandoned_;
        } else {
            ++count_;
        }
        at_[i] = t_ns;
        live_[i] = 1;
        if (seq >= next_) next_ = seq + 1;
    }
    /// The response for `seq` arrived: its send time, or false when no such
    /// request is outstanding (a duplicate, abandoned, or never sent).
    bool complete(uint64_t seq, uint64_t& t_ns) noexcept {
        if (seq >= next_ || next_ - seq > mask_ + 1) return false;
        uint8_t& live = live_[seq & mask_];
        if (!live) return false;
        live = 0;
        --count_;
        t_ns = at_[seq & mask_];
        return true;
    }

private:
    uint64_t mask_;
    std::vector<uint64_t> at_;
    std::vector<uint8_t> live_;
    uint32_t count_ = 0;
    uint64_t abandoned_ = 0;
    uint64_t next_ = 0;  ///< one past the highest sequence number sent
};

}  // namespace pvnet::bench
