#include "pvnet/mem/grant_table.h"

#include <atomic>

namespace pvnet::mem {

std::string_view to_string(GrantError e) noexcept {
    switch (e) {
        case GrantError::ZeroLength: return "zero-length grant request";
        case GrantError::RefOutOfRange: return "grant reference out of range";
        case GrantError::NotGranted: return "grant not permitted (never granted or revoked)";
        case GrantError::WrongDomain: return "grant is for another domain";
        case GrantError::ReadOnly: return "write through a read-only grant";
        case GrantError::CrossesPage: return "offset + length crosses the granted page";
        case GrantError::FrameOutOfRange: return "granted frame outside the frontend's memory";
        case GrantError::TooManySegments: return "too many grants in one chain";
        case GrantError::PoolFull: return "persistent grant pool full, every grant in use";
        case GrantError::SystemError: return "mapping or copying the grant failed";
        case GrantError::OutsidePeer: return "copy outside the frontend's mapping of its memory";
        case GrantError::CopyStopped: return "copies stopped: one failed or the frontend is gone";
        case GrantError::TableFull: return "no free grant reference";
        case GrantError::InUse: return "grant still in use by the backend";
        case GrantError::Count: break;
    }
    return "unknown";
}

namespace {

constexpr uint32_t word_of(uint16_t flags, DomId dom) noexcept {
    return uint32_t{flags} | (uint32_t{dom} << 16);
}

}  // namespace

GrantTable::GrantTable(std::span<std::byte> entries)
    : entries_(reinterpret_cast<GrantEntry*>(entries.data())),
      n_(static_cast<uint32_t>(entries.size() / sizeof(GrantEntry))) {
    free_.reserve(n_);
    // Lowest reference handed out first: LIFO from the back.
    for (uint32_t r = n_; r-- > 0;) free_.push_back(r);
}

Result<GrantRef, GrantError> GrantTable::grant(DomId dom, uint32_t frame, bool readonly) noexcept {
    if (free_.empty()) return unexpected(GrantError::TableFull);
    const GrantRef ref = free_.back();
    free_.pop_back();
    GrantEntry& e = entries_[ref];
    std::atomic_ref<uint32_t>(e.frame).store(frame, std::memory_order_relaxed);
    const uint16_t flags = GTF_permit_access | (readonly ? GTF_readonly : 0);
    // ORDER: release; the frame is visible before the permit bit (Xen's
    // gnttab_grant_foreign_access_ref: wmb() before writing flags).
    e.word.store(word_of(flags, dom), std::memory_order_release);
    return ref;
}

Status<GrantError> GrantTable::end_access(GrantRef ref) noexcept {
    if (ref >= n_) return unexpected(GrantError::RefOutOfRange);
    GrantEntry& e = entries_[ref];
    uint32_t w = e.word.load(std::memory_order_relaxed);
    do {
        if (w & (GTF_reading | GTF_writing)) return unexpected(GrantError::InUse);
        // ORDER: acq_rel; a successful revoke sees the backend's last
        // writes to the page (its unpin released them).
    } while (!e.word.compare_exchange_weak(w, 0, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
    free_.push_back(ref);
    return {};
}

void GrantTable::write_raw(GrantRef ref, uint32_t word, uint32_t frame) noexcept {
    if (ref >= n_) return;
    std::atomic_ref<uint32_t>(entries_[ref].frame).store(frame, std::memory_order_relaxed);
    entries_[ref].word.store(word, std::memory_order_release);
}

GrantRefs::GrantRefs(std::span<std::byte> table, DomId self, uint64_t frames)
    : entries_(reinterpret_cast<GrantEntry*>(table.data())),
      n_(static_cast<uint32_t>(table.size() / sizeof(GrantEntry))),
      self_(self),
      frames_(frames),
      readers_(std::make_unique<uint32_t[]>(n_)),
      writers_(std::make_unique<uint32_t[]>(n_)) {}

Result<PinnedGrant, GrantError> GrantRefs::pin(uint64_t addr, uint32_t len, bool write) noexcept {
    std::lock_guard g(mu_);
    if (len == 0) return reject(GrantError::ZeroLength);
    const uint64_t ref64 = addr >> kGrantPageShift;
    if (ref64 >= n_) return reject(GrantError::RefOutOfRange);
    const auto ref = static_cast<GrantRef>(ref64);
    const auto offset = static_cast<uint32_t>(addr & (kGrantPageBytes - 1));
    if (len > kGrantPageBytes - offset) return reject(GrantError::CrossesPage);

    GrantEntry& e = entries_[ref];
    const uint16_t bit = write ? GTF_writing : GTF_reading;
    // ORDER: acquire; pairs with grant()'s release, so the frame read below
    // is the one the frontend wrote before permitting (Xen's _set_status_v1).
    uint32_t w = e.word.load(std::memory_order_acquire);
    for (;;) {
        const auto flags = static_cast<uint16_t>(w);
        if (!(flags & GTF_permit_access)) return reject(GrantError::NotGranted);
        if (static_cast<DomId>(w >> 16) != self_) return reject(GrantError::WrongDomain);
        if (write && (flags & GTF_readonly)) return reject(GrantError::ReadOnly);
        if (flags & bit) break;
        // The bit and the checks in one step: a revoke racing us either
        // wins (we see no permit) or fails on the bit we set.
        if (e.word.compare_exchange_weak(w, w | bit, std::memory_order_acquire,
                                         std::memory_order_acquire)) {
            break;
        }
    }
    // Read once: a frontend rewriting a held entry changes nothing here.
    const uint32_t frame = std::atomic_ref<uint32_t>(e.frame).load(std::memory_order_relaxed);
    uint32_t& pins = write ? writers_[ref] : readers_[ref];
    if (frame >= frames_) {
        if (pins == 0) e.word.fetch_and(~uint32_t{bit}, std::memory_order_release);
        return reject(GrantError::FrameOutOfRange);
    }
    ++pins;
    return PinnedGrant{ref, frame, offset, write, (static_cast<uint16_t>(w) & GTF_readonly) != 0};
}

void GrantRefs::unpin(GrantRef ref, bool write) noexcept {
    std::lock_guard g(mu_);
    if (ref >= n_) return;
    uint32_t& pins = write ? writers_[ref] : readers_[ref];
    if (pins == 0) return;
    // ORDER: release; our accesses to the page happen before the frontend's
    // successful end_access (its acq_rel compare-and-swap).
    if (--pins == 0) {
        entries_[ref].word.fetch_and(~uint32_t{write ? GTF_writing : GTF_reading},
                                     std::memory_order_release);
    }
}

uint64_t GrantRefs::pinned() const noexcept {
    std::lock_guard g(mu_);
    uint64_t n = 0;
    for (uint32_t r = 0; r < n_; ++r) n += readers_[r] + writers_[r];
    return n;
}

}  // namespace pvnet::mem
