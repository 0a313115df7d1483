// ReplyQueue (see reply_queue.h). Slot i holds a uint32 length then the
// bytes; head_, tail_ and next_ are free-running slot counts, head_ <= tail_
// <= next_ (next_ - tail_ frames committed, not yet published).
#include "pvnet/port/reply_queue.h"

#include <cstring>
#include <new>

#include "pvnet/ring/barrier.h"
#include "pvnet/util/iov.h"

namespace pvnet::port {

Result<std::unique_ptr<ReplyQueue>, PortError> ReplyQueue::create(uint32_t slots,
                                                                  uint32_t slot_bytes,
                                                                  Publish publish) noexcept {
    if (slots < 2 || slots > kMaxSlots || (slots & (slots - 1)) != 0 || slot_bytes == 0 ||
        slot_bytes > (1u << 20)) {
        return unexpected(PortError::BadArenaSize);
    }
    auto ev = notify::EventFd::create();
    if (!ev) return unexpected(PortError::SystemError);
    // Zeroed once here, so the pages are touched at setup, not per packet;
    // a line more, to start the slots on one.
    std::unique_ptr<std::byte[]> arena(
        new (std::nothrow) std::byte[std::size_t{stride_for(slot_bytes)} * slots + 64]());
    if (!arena) return unexpected(PortError::SystemError);
    std::unique_ptr<ReplyQueue> q(
        new (std::nothrow) ReplyQueue(std::move(*ev), std::move(arena), slots, slot_bytes, publish));
    if (!q) return unexpected(PortError::SystemError);
    return q;
}

ReplyQueue::ReplyQueue(notify::EventFd ev, std::unique_ptr<std::byte[]> arena, uint32_t slots,
                       uint32_t slot_bytes, Publish publish) noexcept
    : publish_(publish),
      ev_(std::move(ev)),
      arena_(std::move(arena)),
      base_(arena_.get() + (64 - reinterpret_cast<uintptr_t>(arena_.get()) % 64) % 64),
      slots_(slots),
      slot_bytes_(slot_bytes),
      stride_(stride_for(slot_bytes)) {}

uint32_t ReplyQueue::stride_for(uint32_t slot_bytes) noexcept {
    // An odd number of cache lines: consecutive slots start in different L1
    // sets (1536 bytes, 24 lines, put every slot start in 8 of the 64).
    const uint32_t lines = (4 + slot_bytes + 63) / 64;
    return (lines | 1u) * 64;
}

std::byte* ReplyQueue::reserve() noexcept {
    // ORDER: acquire pairs with pop()'s release of head_: the slot's old
    // frame has been copied out before we overwrite it.
    if (next_ - head_.load(std::memory_order_acquire) >= slots_) {
        stats.retry_full.add();
        return nullptr;
    }
    return slot(next_) + 4;
}

void ReplyQueue::commit(uint32_t len) noexcept {
    std::memcpy(slot(next_), &len, sizeof len);
    ++next_;
    stats.queued.add();
    if (publish_ != Publish::PerBurst) publish();
}

void ReplyQueue::publish() noexcept {
    if (tail_.load(std::memory_order_relaxed) == next_) return;  // our own word
    // ORDER: release pairs with the consumer's acquire of tail_.
    tail_.store(next_, std::memory_order_release);
    if (publish_ == Publish::SameThreadPoll) return;  // nobody sleeps on rx_fd()
    // ORDER: store tail_ -> load armed_; partner: pending()'s full_fence.
    ring::full_fence();
    if (armed_.load(std::memory_order_relaxed) && armed_.exchange(false, std::memory_order_relaxed)) {
        ev_.signal();
    }
}

bool ReplyQueue::pending() noexcept {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (tail_.load(std::memory_order_acquire) != head) return true;
    if (publish_ == Publish::SameThreadPoll) return false;  // asked again next round
    if (!armed_.load(std::memory_order_relaxed)) {
        // Empty: clear stale wakeups, arm, then look again (a frame may have
        // been committed before the producer could see armed_).
        ev_.consume();
        armed_.store(true, std::memory_order_relaxed);
        // ORDER: store armed_ -> load tail_; partner: commit()'s full_fence.
        ring::full_fence();
    }
    return tail_.load(std::memory_order_acquire) != head;
}

uint32_t ReplyQueue::peek_len() noexcept {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (tail_.load(std::memory_order_acquire) == head) return 0;
    uint32_t len;
    std::memcpy(&len, slot(head), sizeof len);
    return len;
}

uint32_t ReplyQueue::pop(std::span<const iovec> dst) noexcept {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (tail_.load(std::memory_order_acquire) == head) return 0;
    // Lengths were bounded by our own producer (<= slot_bytes_) before being written.
    uint32_t len;
    std::memcpy(&len, slot(head), sizeof len);
    const bool fits = copy_to_iov(dst, 0, std::span<const std::byte>(slot(head) + 4, len));
    // ORDER: release pairs with reserve()'s acquire of head_.
    head_.store(head + 1, std::memory_order_release);
    if (!fits) {
        stats.rx_drop_no_room.add();
        return 0;
    }
    stats.rx_pkts.add();
    stats.rx_bytes.add(len);
    return len;
}

uint64_t ReplyQueue::drain() noexcept {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    // No producer call runs (the caller's contract), so its staged frames go
    // too: none may reach the next session.
    const uint64_t tail = next_;
    tail_.store(tail, std::memory_order_relaxed);
    // ORDER: release pairs with reserve()'s acquire of head_ (as pop()).
    head_.store(tail, std::memory_order_release);
    stats.drop_session_end.add(tail - head);
    return tail - head;
}

}  // namespace pvnet::port
