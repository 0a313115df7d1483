// BufferPool: a queue pair's packet buffers, fixed-size slots in guest
// memory and a stack of the free ones. The receive queue posts from it and
// tx completions return to it, so a received buffer can be sent on as is
// (the guest's io forwarding) and comes back when its completion is reaped.
//
// A pool is its queue pair's thread's alone, unless another thread may send
// on the pair (XPS picking another pair's tx queue, VirtioNetConfig::
// shared_pool): then alloc and free take the pool's mutex, held for a few
// instructions (the slab allocator's per-cache lock for remote frees).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pvnet/frontend/config.h"
#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/util/assert.h"
#include "pvnet/util/result.h"

namespace pvnet::frontend {

class BufferPool {
public:
    /// `n` slots of `buf_bytes` each from `gpa` on, all free; they must lie
    /// in one region of `table` (the guest's own view).
    static Result<BufferPool, FrontendError> create(const mem::MemoryTable& table,
                                                    mem::GuestAddr gpa, uint32_t n,
                                                    uint32_t buf_bytes,
                                                    bool shared = false) noexcept;

    std::byte* host(uint32_t id) const noexcept { return host_ + std::size_t{id} * buf_bytes_; }
    mem::GuestAddr gpa(uint32_t id) const noexcept { return gpa_ + uint64_t{id} * buf_bytes_; }

    void free(uint32_t id) noexcept {
        if (lock_) {
            std::lock_guard g(*lock_);
            free_locked(id);
        } else {
            free_locked(id);
        }
    }
    /// Takes a free buffer; false if none.
    bool alloc(uint32_t& id) noexcept {
        if (lock_) {
            std::lock_guard g(*lock_);
            return alloc_locked(id);
        }
        return alloc_locked(id);
    }

    uint32_t buf_bytes() const noexcept { return buf_bytes_; }
    uint32_t free_count() const noexcept {
        if (lock_) {
            std::lock_guard g(*lock_);
            return top_;
        }
        return top_;
    }
    uint32_t size() const noexcept { return n_; }

private:
    void free_locked(uint32_t id) noexcept {
        // Our own bug if this fails (a double free); never a peer's value.
        if (PVNET_ASSERT(id < n_ && top_ < n_)) ids_[top_++] = id;
    }
    bool alloc_locked(uint32_t& id) noexcept {
        if (top_ == 0) return false;
        id = ids_[--top_];
        return true;
    }

    mem::GuestAddr gpa_;
    std::byte* host_ = nullptr;
    uint32_t buf_bytes_ = 0;
    uint32_t n_ = 0;
    std::vector<uint32_t> ids_;  ///< free buffer ids (a stack), sized once
    uint32_t top_ = 0;
    std::unique_ptr<std::mutex> lock_;  ///< set when shared
};

}  // namespace pvnet::frontend
