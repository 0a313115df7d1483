// Receive steering state (rx_steer.h has the rules and the grace period).
#include "pvnet/backend/rx_steer.h"

#include <algorithm>
#include <thread>

namespace pvnet::backend {

// ORDER: every access to cur_, epoch_ and readers_ is seq_cst. A reader
// bumps readers_[e] (e: the epoch it loaded) before it loads cur_; a writer
// stores cur_ before it flips the epoch and reads the counter it left. In
// the single total order, a reader whose load of cur_ precedes the store
// (the only one that can hold the old slot) has its bump before the
// writer's counter reads, so one of the two waits sees it until it leaves.
// Two flips, as userspace RCU's synchronize: a reader may have loaded the
// epoch one flip ago and bumped the counter the last wait no longer watched.
class RxSteer::Hold {
public:
    explicit Hold(const RxSteer& s) noexcept : ctr_(s.readers_[s.epoch_.load() & 1u]) {
        ctr_.fetch_add(1);
        state_ = s.cur_.load();
    }
    ~Hold() { ctr_.fetch_sub(1); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    const State* operator->() const noexcept { return state_; }

private:
    std::atomic<uint32_t>& ctr_;
    const State* state_ = nullptr;
};

RxSteer::RxSteer(uint16_t max_pairs) : max_pairs_(std::max<uint16_t>(max_pairs, 1)) {
    slots_[0].active_pairs = max_pairs_;
    cur_.store(&slots_[0]);
}

uint16_t RxSteer::active_pairs() const noexcept { return Hold(*this)->active_pairs; }

bool RxSteer::rss_enabled() const noexcept { return Hold(*this)->rss.has_value(); }

bool RxSteer::hashing_enabled() const noexcept {
    const Hold s(*this);
    return s->rss.has_value() || s->hash.has_value();
}

net::RxSteering RxSteer::steer(std::span<const uint8_t> frame, uint16_t arrival) const noexcept {
    return steer(net::hash_head(frame), net::hash_frame_len(frame), arrival);
}

net::RxSteering RxSteer::steer(std::span<const uint8_t> head, uint32_t frame_len,
                               uint16_t arrival) const noexcept {
    const Hold s(*this);
    const uint16_t active = s->active_pairs;  // >= 1: every publish clamps it
    if (s->rss) {
        net::RxSteering r = net::select_rx_queue(*s->rss, head, frame_len);
        if (r.queue >= active) r.queue = static_cast<uint16_t>(r.queue % active);
        return r;
    }
    net::RxSteering r;
    if (s->hash) r = net::hash_frame(*s->hash, head, frame_len);
    r.queue = arrival < active ? arrival : static_cast<uint16_t>(arrival % active);
    return r;
}

uint16_t RxSteer::clamp_pairs(uint16_t n) const noexcept {
    return std::clamp<uint16_t>(n, 1, max_pairs_);
}

void RxSteer::set_active_pairs(uint16_t n) noexcept {
    // The writer's own snapshot: no other writer runs (the caller serialises).
    publish(clamp_pairs(n), std::nullopt, cur_.load()->hash);
}

void RxSteer::set_rss(const net::RssConfig& c) noexcept {
    publish(clamp_pairs(c.max_tx_vq), c, std::nullopt);
}

void RxSteer::set_hash_config(const net::HashConfig& c) noexcept {
    const State* cur = cur_.load();
    publish(cur->active_pairs, cur->rss, c);
}

void RxSteer::reset(uint16_t active) noexcept {
    publish(clamp_pairs(active), std::nullopt, std::nullopt);
}

void RxSteer::publish(uint16_t active, const std::optional<net::RssConfig>& rss,
                      const std::optional<net::HashConfig>& hash) noexcept {
    // The spare slot has no reader: the last publish waited them out.
    State& spare = cur_.load() == &slots_[0] ? slots_[1] : slots_[0];
    spare.active_pairs = active;
    spare.rss = rss;
    spare.hash = hash;
    cur_.store(&spare);
    for (int flip = 0; flip < 2; ++flip) {
        const uint32_t left = epoch_.load();
        epoch_.store(left + 1);
        // Only readers already inside (bounded work each) hold this counter.
        while (readers_[left & 1u].load() != 0) std::this_thread::yield();
    }
}

}  // namespace pvnet::backend
