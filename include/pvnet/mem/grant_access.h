// The backend's three ways to reach granted pages (issue 13, seed 004),
// behind BufferAccess so one ring serves them all:
//   GrantMapper          map each granted page for its request, unmap it once
//                        the chain is used: a page-table update and a TLB
//                        flush per packet (Xen's GNTTABOP_map/unmap_grant_ref).
//   GrantCopier          never map: the kernel copies between the frontend's
//                        memfd and a bounce page (pread/pwrite, or
//                        process_vm_readv/writev), as GNTTABOP_copy does.
//   PersistentGrantPool  map a grant the first time it is seen and keep it,
//                        keyed by reference, bounded at the ring's size;
//                        data moves with memcpy (the seed's persistent grants).
// Every mapping of a frontend page sits between PROT_NONE guard pages
// (GuardedSlots), so an access that escapes its page faults instead of
// reaching a neighbour. One queue's thread owns each object.
//
// A system call that fails never leaves the backend worse off: a slot whose
// guard cannot be shown back in place is never used (nor unmapped) again, a
// page that may still be mapped stays pinned, and a copy that fails stops
// the copier for good (issue 23). Each is counted; the ring breaks the queue.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pvnet/mem/buffer_access.h"
#include "pvnet/mem/grant_peer.h"
#include "pvnet/mem/grant_table.h"
#include "pvnet/util/counters.h"

namespace pvnet::mem {

/// Grants one packet may use (Xen netback's XEN_NETBK_LEGACY_SLOTS_MAX).
inline constexpr uint32_t kMaxGrantsPerChain = 18;

struct GrantAccessStats {
    Counter maps;            ///< grants a chain used (one per descriptor)
    Counter map_syscalls;    ///< mmap of a frontend page
    Counter unmap_syscalls;  ///< its unmapping (a guard page mapped back)
    Counter copy_syscalls;   ///< pread / pwrite / process_vm_readv / _writev
    Counter copy_bytes;      ///< bytes the kernel copied
    Counter copy_back_failed;  ///< rx data not copied back: the grant, the copy or the peer failed
    Counter slots_lost;        ///< slots whose guard could not be put back: never used again
    Counter pool_hits, pool_misses, pool_evictions;
};

/// Where the frontend's memory is, for the backend.
struct GrantSource {
    GrantRefs* refs = nullptr;  ///< the frontend's table, validated and pinned here
    int data_fd = -1;           ///< the frontend's data memfd (frames are its pages)
    GrantPeer* peer = nullptr;  ///< for process_vm_*: the checked frontend process
};

/// A reservation of page slots, each between PROT_NONE guard pages.
class GuardedSlots {
public:
    /// `lost` counts the slots given up (see map and unmap).
    GuardedSlots(uint32_t n, Counter& lost);
    ~GuardedSlots();
    GuardedSlots(const GuardedSlots&) = delete;
    GuardedSlots& operator=(const GuardedSlots&) = delete;

    bool ok() const noexcept { return base_ != nullptr; }
    std::byte* page(uint32_t i) const noexcept {
        return base_ + (2u * std::size_t{i} + 1u) * kGrantPageBytes;
    }
    /// Given up (see map and unmap): never mapped again.
    bool lost(uint32_t i) const noexcept { return i >= n_ || lost_[i]; }
    /// Maps page `frame` of `fd` into slot `i` (one mmap, page tables filled).
    /// On failure the slot is a guard again, or lost: never touched again,
    /// since a failed MAP_FIXED may have left a hole that anything may fill.
    bool map(uint32_t i, int fd, uint32_t frame, bool writable) noexcept;
    /// Puts the guard back over slot `i` (one mmap of PROT_NONE). False: the
    /// frontend's page may still be mapped there (the slot is lost, and the
    /// caller must keep the grant pinned so the frontend cannot reuse it).
    [[nodiscard]] bool unmap(uint32_t i) noexcept;

private:
    /// After a failed call left slot `i` unmapped or unknown: a guard again, or lost.
    void restore_guard(uint32_t i) noexcept;

    std::byte* base_ = nullptr;
    std::size_t bytes_ = 0;
    uint32_t n_ = 0;
    std::vector<bool> lost_;
    Counter& lost_count_;
};

/// What the three modes share: each chain's grants, in descriptor order.
class GrantAccess : public BufferAccess {
public:
    ~GrantAccess() override = default;
    const GrantAccessStats& stats() const noexcept { return stats_; }
    /// False: its slots or bounce pages could not be reserved (mmap failed).
    virtual bool ok() const noexcept = 0;
    void unmap(uint16_t head, uint32_t written) noexcept override;
    void unmap_all() noexcept override;
    /// The device is gone: every chain finished and every grant kept
    /// (a persistent pool's) unmapped and released.
    virtual void release_all() noexcept { unmap_all(); }

protected:
    GrantAccess(const GrantSource& src, uint16_t ring_size);

    struct Seg {
        PinnedGrant g;
        uint32_t len = 0;
        uint32_t slot = 0;  ///< the mode's page: map slot, bounce page or pool entry
    };
    static constexpr uint32_t kNone = UINT32_MAX;

    /// A segment for chain `head` (kNone: the chain has its fill: counted).
    uint32_t add_seg(uint16_t head) noexcept;
    /// Releases one segment's page, the mode's way (written: its bytes that hold data).
    virtual void release(Seg& s, uint32_t written) noexcept = 0;

    GrantSource src_;
    uint16_t ring_size_;
    std::vector<Seg> segs_;  ///< kMaxGrantsPerChain per head: segment h * k + j
    std::vector<uint32_t> count_;  ///< segments per head
    GrantAccessStats stats_;
};

class GrantMapper final : public GrantAccess {
public:
    GrantMapper(const GrantSource& src, uint16_t ring_size);
    ~GrantMapper() override;
    bool ok() const noexcept override { return slots_.ok(); }
    bool map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
             iovec& out) noexcept override;

private:
    void release(Seg& s, uint32_t written) noexcept override;
    GuardedSlots slots_;
};

enum class CopyVia : uint8_t { Pread, ProcessVm };

class GrantCopier final : public GrantAccess {
public:
    /// ProcessVm copies reach only `src.peer` (none without one).
    GrantCopier(const GrantSource& src, uint16_t ring_size, CopyVia via);
    ~GrantCopier() override;
    bool ok() const noexcept override { return bounce_ != nullptr; }
    bool map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
             iovec& out) noexcept override;

private:
    void release(Seg& s, uint32_t written) noexcept override;
    /// One kernel copy between the frontend's page and `local`; a failure
    /// (counted) stops every later copy, and a process_vm one the peer's too.
    bool copy(const PinnedGrant& g, std::byte* local, uint32_t len, bool to_frontend) noexcept;
    bool stopped() const noexcept {
        return failed_ ||
               (via_ == CopyVia::ProcessVm && (src_.peer == nullptr || src_.peer->gone()));
    }
    CopyVia via_;
    bool failed_ = false;
    std::byte* bounce_ = nullptr;  ///< a page per segment, backend memory
    std::size_t bounce_bytes_ = 0;
};

class PersistentGrantPool final : public GrantAccess {
public:
    /// Holds at most `ring_size` grants mapped (the seed's bound per direction).
    PersistentGrantPool(const GrantSource& src, uint16_t ring_size);
    ~PersistentGrantPool() override;
    bool ok() const noexcept override { return slots_.ok(); }
    bool map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
             iovec& out) noexcept override;
    uint32_t mapped() const noexcept { return mapped_; }
    void release_all() noexcept override;

private:
    struct Entry {
        PinnedGrant g;  ///< pinned for reading, and for writing unless read-only
        uint32_t in_use = 0;
        uint64_t last_use = 0;
        bool valid = false;
    };
    void release(Seg& s, uint32_t written) noexcept override;
    /// An entry to fill: a free one, else the least recently used idle one
    /// (unmapped, counted); kNone when every entry is in use.
    uint32_t victim() noexcept;
    void drop(uint32_t e) noexcept;

    GuardedSlots slots_;
    std::vector<Entry> entries_;
    std::vector<uint32_t> entry_of_ref_;  ///< kNone: not in the pool
    uint32_t mapped_ = 0;
    uint64_t clock_ = 0;
};

}  // namespace pvnet::mem
