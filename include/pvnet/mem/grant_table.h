// Grant tables: the frontend shares its memory one page at a time (Xen's
// split drivers, seed 004; DESIGN.md layer 2). The frontend owns the table,
// in a region the backend maps whole; each entry says which page (frame, in
// the frontend's data memfd), for which domain, and whether read-only.
// A descriptor's address names a grant reference and an offset in its page
// (grant_addr), as virtio devices on Xen address memory through grants.
//
// The entry is Xen's grant_entry_v1: flags and domid in one 32-bit word (so
// both sides update them with one compare-and-swap), then the frame. While
// the backend holds a grant (pinned: mapped, or being copied), the reading /
// writing bits are set in the shared entry, as Xen's hypervisor sets them;
// the frontend's end_access fails while they are (gnttab_end_foreign_access_ref
// returns 0) and must not reuse the page until a later end_access succeeds.
// A frontend that clears the entry anyway cannot hurt the backend: the
// backend's mapping is of the memfd, valid until the backend unmaps it, and
// the frame it maps was read once, at pin time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "pvnet/util/counters.h"
#include "pvnet/util/result.h"

namespace pvnet::mem {

using GrantRef = uint32_t;
using DomId = uint16_t;

inline constexpr unsigned kGrantPageShift = 12;
inline constexpr uint32_t kGrantPageBytes = 1u << kGrantPageShift;

// grant_entry_v1 flags (Xen include/xen/interface/grant_table.h).
inline constexpr uint16_t GTF_permit_access = 1u << 0;
inline constexpr uint16_t GTF_readonly = 1u << 2;
inline constexpr uint16_t GTF_reading = 1u << 3;
inline constexpr uint16_t GTF_writing = 1u << 4;

/// One entry in shared memory: `word` is flags | domid << 16 (the v1
/// layout's first two fields on a little-endian machine).
struct GrantEntry {
    std::atomic<uint32_t> word;
    uint32_t frame;
};
static_assert(sizeof(GrantEntry) == 8);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

/// A descriptor address: reference in the high bits, offset in its page.
constexpr uint64_t grant_addr(GrantRef ref, uint32_t offset) noexcept {
    return (uint64_t{ref} << kGrantPageShift) | offset;
}

enum class GrantError : uint8_t {
    ZeroLength,       ///< a request of zero bytes
    RefOutOfRange,    ///< reference beyond the table (or beyond 2^32 pages)
    NotGranted,       ///< permit_access clear: never granted, or revoked
    WrongDomain,      ///< granted to another domain
    ReadOnly,         ///< a write through a read-only grant
    CrossesPage,      ///< offset + length past the granted page
    FrameOutOfRange,  ///< the frame lies beyond the frontend's memory
    TooManySegments,  ///< a chain with more grants than a packet may use
    PoolFull,         ///< every persistent grant is in use: nothing to evict
    SystemError,      ///< mmap, pread/pwrite or process_vm_* failed
    OutsidePeer,      ///< a process_vm copy past the frontend's checked mapping
    CopyStopped,      ///< copy mode stopped: a copy failed, or the frontend process is gone
    TableFull,        ///< frontend: no free reference
    InUse,            ///< frontend: end_access while the backend holds it
    Count
};

std::string_view to_string(GrantError e) noexcept;

using GrantErrorCounters = CounterArray<GrantError>;

/// The frontend's side: grants and revokes. One owner thread.
class GrantTable {
public:
    /// Over `entries` (shared memory, zeroed: nothing granted), 8 bytes an entry.
    explicit GrantTable(std::span<std::byte> entries);

    /// Grants `frame` to domain `dom`; the entry is complete before the
    /// permit bit is visible (release).
    Result<GrantRef, GrantError> grant(DomId dom, uint32_t frame, bool readonly) noexcept;
    /// Revokes, unless the backend holds the grant (InUse): the page must
    /// then stay untouched, and the caller retries later.
    Status<GrantError> end_access(GrantRef ref) noexcept;
    /// Writes an entry as it is, without the free list or any check (tests
    /// and fuzzing play a hostile frontend with it).
    void write_raw(GrantRef ref, uint32_t word, uint32_t frame) noexcept;

    uint32_t size() const noexcept { return n_; }
    uint32_t free_refs() const noexcept { return static_cast<uint32_t>(free_.size()); }

private:
    GrantEntry* entries_;
    uint32_t n_;
    std::vector<GrantRef> free_;
};

/// A grant the backend holds: where its page is and how it may use it.
struct PinnedGrant {
    GrantRef ref = 0;
    uint32_t frame = 0;
    uint32_t offset = 0;
    bool write = false;
    bool readonly = false;  ///< the grant's own flag (a persistent mapping's protection)
};

/// The backend's side (Xen's active grant table): validates a request
/// against the shared entry and holds it pinned. Several backend threads of
/// one frontend may pin and unpin (tx and rx, the direct path).
class GrantRefs {
public:
    /// `table` is the frontend's table as mapped here; `self` the backend's
    /// domain; `frames` the pages of the frontend's data memfd.
    GrantRefs(std::span<std::byte> table, DomId self, uint64_t frames);

    /// Validates [addr, addr + len) for reading or writing and pins it.
    /// Every rejection is counted (errors()).
    Result<PinnedGrant, GrantError> pin(uint64_t addr, uint32_t len, bool write) noexcept;
    /// Releases one pin; the shared reading / writing bit is cleared with
    /// the last one.
    void unpin(GrantRef ref, bool write) noexcept;

    uint32_t size() const noexcept { return n_; }
    uint64_t pinned() const noexcept;
    const GrantErrorCounters& errors() const noexcept { return errors_; }
    /// For the access modes' own rejections, counted with the table's.
    void count(GrantError e) noexcept {
        std::lock_guard g(mu_);
        errors_.add(e);
    }

private:
    Result<PinnedGrant, GrantError> reject(GrantError e) noexcept {
        errors_.add(e);
        return unexpected(e);
    }

    GrantEntry* entries_;
    uint32_t n_;
    DomId self_;
    uint64_t frames_;
    // Pin counts per reference (readers, writers). Guarded by mu_: the shared
    // bit must be set before the first pin counts and cleared after the last,
    // with no pin sneaking in between (uncontended: one lock per request).
    mutable std::mutex mu_;
    std::unique_ptr<uint32_t[]> readers_;
    std::unique_ptr<uint32_t[]> writers_;
    GrantErrorCounters errors_;
};

}  // namespace pvnet::mem
