// Flow send credit: the sndbuf check, its stall accounting, and the charge /
// release hooks SendQueue calls at transmit and completion.
#include "pvnet/frontend/flow.h"

#include "pvnet/util/assert.h"
#include "pvnet/util/clock.h"

namespace pvnet::frontend {

bool Flow::can_send(uint32_t bytes) noexcept {
    // The clock is read only on a refusal or the success that ends a stall.
    if (has_credit(bytes) && !stalled_) return true;
    return can_send(bytes, pvnet::now_ns());
}

bool Flow::can_send(uint32_t bytes, uint64_t now_ns) noexcept {
    if (has_credit(bytes)) {
        if (stalled_) {
            stalled_ = false;
            stats_.sndbuf_stall_ns.add(now_ns > stall_start_ns_ ? now_ns - stall_start_ns_ : 0);
        }
        return true;
    }
    stats_.sndbuf_refusals.add();
    if (!stalled_) {
        stalled_ = true;
        stall_start_ns_ = now_ns;
        stats_.sndbuf_stalls.add();
    }
    return false;
}

void Flow::charge(uint32_t bytes) noexcept {
    // Our bug if this fails: QueuePair checks has_credit before charging.
    if (!PVNET_ASSERT(has_credit(bytes))) return;
    in_flight_ += bytes;
    stats_.sent_pkts.add();
    stats_.sent_bytes.add(bytes);
    if (in_flight_ > max_in_flight_) {
        stats_.max_in_flight_bytes.add(in_flight_ - max_in_flight_);
        max_in_flight_ = in_flight_;
    }
}

void Flow::release(uint32_t bytes, bool completed) noexcept {
    // Our bug if this fails: each charge is released exactly once.
    if (!PVNET_ASSERT(bytes <= in_flight_)) return;
    in_flight_ -= bytes;
    if (completed) stats_.completed_pkts.add();
}

}  // namespace pvnet::frontend
