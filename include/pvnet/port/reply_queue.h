// ReplyQueue: the frames a reflecting port (MacswapPort, IcmpEchoPort) has
// made from what the guest sent (send(), handle_tx) and hands back to the
// guest (recv(), handle_rx). A single-producer / single-consumer ring of
// fixed slots, each large enough for hdr + the largest frame, allocated at
// create(): no allocation per packet. A full queue is the port's Retry.
//
// rx_fd() (the worker's epoll, event mode) is an eventfd signalled when a
// frame is published after the reader found the queue empty (PeerPort's
// arm-then-recheck scheme, so the reader is never left asleep).
//
// How frames are published is fixed at create() (Publish): each commit()
// on its own (the default), once per producer burst (publish(), which the
// device calls through the port's flush_tx at the end of each tx burst),
// or, when the reader is the producer's own thread polling (serve --mode
// poll: one worker runs a pair's tx and rx), without the store→load fence
// and the eventfd that only a sleeping reader on another thread needs.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "pvnet/notify/event_fd.h"
#include "pvnet/port/gen_port.h"
#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::port {

/// The consumer side's counters (what became of the queued frames).
struct ReplyQueueStats {
    Counter queued;           ///< frames committed
    Counter retry_full;       ///< reserve() found every slot taken
    Counter rx_pkts;          ///< frames handed to recv()'s buffers
    Counter rx_bytes;         ///< hdr + frame bytes of those
    Counter rx_drop_no_room;  ///< recv()'s buffers shorter than the frame
    Counter drop_session_end;  ///< still queued when the guest's session ended (drain())
};

class ReplyQueue {
public:
    static constexpr uint32_t kMaxSlots = 1u << 16;

    /// When committed frames become visible to the reader, and how it is woken.
    enum class Publish : uint8_t {
        EachFrame,  ///< commit() publishes; a full fence and the wake-up check per frame
        PerBurst,   ///< commit() stages; publish() publishes them, one fence and check per burst
        SameThreadPoll,  ///< commit() publishes; the reader is this thread, polling:
                         ///< no fence, rx_fd() never armed nor signalled
    };

    /// `slots` (a power of two, 2..kMaxSlots) of `slot_bytes` each.
    static Result<std::unique_ptr<ReplyQueue>, PortError> create(
        uint32_t slots, uint32_t slot_bytes, Publish publish = Publish::EachFrame) noexcept;
    ReplyQueue(const ReplyQueue&) = delete;
    ReplyQueue& operator=(const ReplyQueue&) = delete;

    uint32_t slot_bytes() const noexcept { return slot_bytes_; }

    // ---- producer (the port's send) ---------------------------------------
    /// The next free slot (slot_bytes() long), or null when the queue is full
    /// (counted in retry_full). Nothing is visible until commit().
    std::byte* reserve() noexcept;
    /// Ends the reserved slot, holding `len` (<= slot_bytes()) bytes; published
    /// now, or with PerBurst at the next publish().
    void commit(uint32_t len) noexcept;
    /// Publishes every committed frame, and wakes an armed reader once.
    void publish() noexcept;

    // ---- consumer (the port's rx_pending / peek_len / recv) ---------------
    /// A frame waits; when none does, arms rx_fd() for the next commit().
    bool pending() noexcept;
    /// Bytes of the oldest frame, 0 if none.
    uint32_t peek_len() noexcept;
    /// Copies the oldest frame into dst and frees its slot: its length, or 0
    /// if none waits or it does not fit (then dropped, rx_drop_no_room).
    uint32_t pop(std::span<const iovec> dst) noexcept;
    /// Drops every queued frame, published or staged (drop_session_end): the
    /// consumer's call, with no producer call running. Returns how many.
    uint64_t drain() noexcept;
    /// Frames queued and not yet popped.
    uint64_t size() const noexcept {
        return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
    }

    int rx_fd() const noexcept { return ev_.fd(); }

    ReplyQueueStats stats;

private:
    ReplyQueue(notify::EventFd ev, std::unique_ptr<std::byte[]> arena, uint32_t slots,
               uint32_t slot_bytes, Publish publish) noexcept;
    std::byte* slot(uint64_t i) noexcept {
        return base_ + (i & (slots_ - 1)) * std::size_t{stride_};
    }

    alignas(64) std::atomic<uint64_t> tail_{0};  ///< published: what the reader may pop
    alignas(64) std::atomic<uint64_t> head_{0};
    alignas(64) std::atomic<bool> armed_{false};
    // The producer's own line: the next slot to reserve (tail_ + staged frames).
    alignas(64) uint64_t next_ = 0;
    Publish publish_;
    notify::EventFd ev_;
    static uint32_t stride_for(uint32_t slot_bytes) noexcept;

    std::unique_ptr<std::byte[]> arena_;
    std::byte* base_;  ///< slot 0: arena_'s first 64-byte aligned byte
    uint32_t slots_;
    uint32_t slot_bytes_;
    uint32_t stride_;  ///< a 4-byte length, then the bytes; an odd number of cache lines
};

}  // namespace pvnet::port
