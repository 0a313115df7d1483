#include "pvnet/mem/grant_access.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

namespace pvnet::mem {

GuardedSlots::GuardedSlots(uint32_t n, Counter& lost)
    : bytes_((2u * std::size_t{n} + 1u) * kGrantPageBytes), n_(n), lost_(n, false),
      lost_count_(lost) {
    void* p = ::mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) base_ = static_cast<std::byte*>(p);
}

GuardedSlots::~GuardedSlots() {
    if (base_ == nullptr) return;
    // Around the lost slots: what fills them is not ours to unmap.
    std::byte* from = base_;
    for (uint32_t i = 0; i < n_; ++i) {
        if (!lost_[i]) continue;
        ::munmap(from, static_cast<std::size_t>(page(i) - from));
        from = page(i) + kGrantPageBytes;
    }
    ::munmap(from, static_cast<std::size_t>(base_ + bytes_ - from));
}

void GuardedSlots::restore_guard(uint32_t i) noexcept {
    // Only into a hole: whatever else is there (our guard, kept by a kernel
    // that undoes a failed MAP_FIXED, or someone's mapping that took the
    // hole) is left alone, and the slot with it.
    void* p = ::mmap(page(i), kGrantPageBytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == page(i)) return;
    if (p != MAP_FAILED) ::munmap(p, kGrantPageBytes);  // a kernel that took it as a hint
    lost_[i] = true;
    lost_count_.add();
}

bool GuardedSlots::map(uint32_t i, int fd, uint32_t frame, bool writable) noexcept {
    if (!ok() || lost(i)) return false;
    // MAP_POPULATE: the page-table entry is made here, as a grant map
    // hypercall makes it, not by a fault on first touch.
    void* p = ::mmap(page(i), kGrantPageBytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                     MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd,
                     static_cast<off_t>(uint64_t{frame} << kGrantPageShift));
    if (p != MAP_FAILED) return true;
    restore_guard(i);
    return false;
}

bool GuardedSlots::unmap(uint32_t i) noexcept {
    // Replacing the mapping drops the frontend's page and restores the
    // guard in one call.
    if (::mmap(page(i), kGrantPageBytes, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED) {
        return true;
    }
    // Then in two: the page's own mapping goes whole (no split, so no new
    // mapping is needed), and the guard comes back into the hole.
    if (::munmap(page(i), kGrantPageBytes) != 0) {
        lost_[i] = true;
        lost_count_.add();
        return false;
    }
    restore_guard(i);
    return true;
}

GrantAccess::GrantAccess(const GrantSource& src, uint16_t ring_size)
    : src_(src),
      ring_size_(ring_size),
      segs_(std::size_t{ring_size} * kMaxGrantsPerChain),
      count_(ring_size, 0) {}

uint32_t GrantAccess::add_seg(uint16_t head) noexcept {
    if (head >= ring_size_ || count_[head] >= kMaxGrantsPerChain) {
        src_.refs->count(GrantError::TooManySegments);
        return kNone;
    }
    return head * kMaxGrantsPerChain + count_[head]++;
}

void GrantAccess::unmap(uint16_t head, uint32_t written) noexcept {
    if (head >= ring_size_) return;
    // Writable segments follow the readable ones; `written` fills them in order.
    for (uint32_t j = 0; j < count_[head]; ++j) {
        Seg& s = segs_[head * kMaxGrantsPerChain + j];
        uint32_t w = 0;
        if (s.g.write) {
            w = written < s.len ? written : s.len;
            written -= w;
        }
        release(s, w);
    }
    count_[head] = 0;
}

void GrantAccess::unmap_all() noexcept {
    for (uint16_t h = 0; h < ring_size_; ++h) {
        for (uint32_t j = 0; j < count_[h]; ++j) release(segs_[h * kMaxGrantsPerChain + j], 0);
        count_[h] = 0;
    }
}

// ---- map: one mmap and one unmapping per grant ------------------------------

GrantMapper::GrantMapper(const GrantSource& src, uint16_t ring_size)
    : GrantAccess(src, ring_size),
      slots_(static_cast<uint32_t>(ring_size) * kMaxGrantsPerChain, stats_.slots_lost) {}

GrantMapper::~GrantMapper() { unmap_all(); }

bool GrantMapper::map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
                      iovec& out) noexcept {
    auto g = src_.refs->pin(addr, len, writable);
    if (!g) return false;
    const uint32_t i = add_seg(head);
    if (i == kNone || !slots_.ok() || !slots_.map(i, src_.data_fd, g->frame, writable)) {
        if (i != kNone) {
            --count_[head];
            src_.refs->count(GrantError::SystemError);
        }
        src_.refs->unpin(g->ref, writable);
        return false;
    }
    stats_.maps.add();
    stats_.map_syscalls.add();
    segs_[i] = Seg{*g, len, i};
    out = iovec{slots_.page(i) + g->offset, len};
    return true;
}

void GrantMapper::release(Seg& s, uint32_t) noexcept {
    stats_.unmap_syscalls.add();
    // Still mapped: held for good, so the frontend never reuses the page.
    if (slots_.unmap(s.slot)) src_.refs->unpin(s.g.ref, s.g.write);
}

// ---- copy: the kernel copies, nothing of the frontend is mapped -------------

GrantCopier::GrantCopier(const GrantSource& src, uint16_t ring_size, CopyVia via)
    : GrantAccess(src, ring_size),
      via_(via),
      bounce_bytes_(std::size_t{ring_size} * kMaxGrantsPerChain * kGrantPageBytes) {
    void* p = ::mmap(nullptr, bounce_bytes_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) bounce_ = static_cast<std::byte*>(p);
}

GrantCopier::~GrantCopier() {
    unmap_all();
    if (bounce_ != nullptr) ::munmap(bounce_, bounce_bytes_);
}

bool GrantCopier::copy(const PinnedGrant& g, std::byte* local, uint32_t len,
                       bool to_frontend) noexcept {
    const uint64_t off = (uint64_t{g.frame} << kGrantPageShift) + g.offset;
    // A copy back that fails is counted by the caller (copy_back_failed)
    // only: the peer may have gone at teardown, with rx buffers still posted.
    const bool request = !to_frontend;
    if (stopped()) {
        if (request) src_.refs->count(GrantError::CopyStopped);
        return false;
    }
    GrantPeer* const peer = src_.peer;
    ssize_t n;
    if (via_ == CopyVia::Pread) {
        n = to_frontend ? ::pwrite(src_.data_fd, local, len, static_cast<off_t>(off))
                        : ::pread(src_.data_fd, local, len, static_cast<off_t>(off));
    } else {
        // Inside the range checked to be the peer's mapping of the memfd,
        // whatever the grant's frame says.
        if (off > peer->bytes() || len > peer->bytes() - off) {
            src_.refs->count(GrantError::OutsidePeer);
            failed_ = true;
            return false;
        }
        const iovec l{local, len};
        const iovec r{reinterpret_cast<void*>(peer->base() + off), len};
        n = to_frontend ? ::process_vm_writev(peer->pid(), &l, 1, &r, 1, 0)
                        : ::process_vm_readv(peer->pid(), &l, 1, &r, 1, 0);
    }
    stats_.copy_syscalls.add();
    if (n != static_cast<ssize_t>(len)) {
        if (request) src_.refs->count(GrantError::SystemError);
        failed_ = true;
        // The process is gone or has changed its memory: its pid may be
        // another's soon, so neither direction names it again.
        if (via_ == CopyVia::ProcessVm) peer->set_gone();
        return false;
    }
    stats_.copy_bytes.add(len);
    return true;
}

bool GrantCopier::map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
                      iovec& out) noexcept {
    // Stopped: every request is refused, so the ring breaks the queue.
    if (stopped()) {
        src_.refs->count(GrantError::CopyStopped);
        return false;
    }
    // A grant copy holds the grant only while it copies: validated now,
    // and again when rx data is copied back.
    auto g = src_.refs->pin(addr, len, writable);
    if (!g) return false;
    const uint32_t i = add_seg(head);
    bool ok = i != kNone;
    if (ok && bounce_ == nullptr) {
        src_.refs->count(GrantError::SystemError);
        ok = false;
    }
    std::byte* local = ok ? bounce_ + std::size_t{i} * kGrantPageBytes : nullptr;
    if (ok && !writable && !copy(*g, local, len, false)) ok = false;
    src_.refs->unpin(g->ref, writable);
    if (!ok) {
        if (i != kNone) --count_[head];
        return false;
    }
    stats_.maps.add();
    segs_[i] = Seg{*g, len, i};
    out = iovec{local, len};
    return true;
}

void GrantCopier::release(Seg& s, uint32_t written) noexcept {
    if (written == 0) return;
    // The frontend may have revoked since: validate again, as the copy
    // hypercall would, and count the loss rather than write anywhere.
    auto g = src_.refs->pin(grant_addr(s.g.ref, s.g.offset), written, true);
    if (!g) {
        stats_.copy_back_failed.add();
        return;
    }
    if (!copy(*g, bounce_ + std::size_t{s.slot} * kGrantPageBytes, written, true)) {
        stats_.copy_back_failed.add();
    }
    src_.refs->unpin(g->ref, true);
}

// ---- persistent: mapped once, kept, looked up by reference ------------------

PersistentGrantPool::PersistentGrantPool(const GrantSource& src, uint16_t ring_size)
    : GrantAccess(src, ring_size),
      slots_(ring_size, stats_.slots_lost),
      entries_(ring_size),
      entry_of_ref_(src.refs->size(), kNone) {}

PersistentGrantPool::~PersistentGrantPool() { release_all(); }

void PersistentGrantPool::release_all() noexcept {
    unmap_all();
    for (uint32_t e = 0; e < entries_.size(); ++e) drop(e);
}

void PersistentGrantPool::drop(uint32_t e) noexcept {
    Entry& en = entries_[e];
    if (!en.valid) return;
    stats_.unmap_syscalls.add();
    // Still mapped: held for good, so the frontend never reuses the page.
    if (slots_.unmap(e)) {
        src_.refs->unpin(en.g.ref, false);
        if (en.g.write) src_.refs->unpin(en.g.ref, true);
    }
    entry_of_ref_[en.g.ref] = kNone;
    en.valid = false;
    --mapped_;
}

uint32_t PersistentGrantPool::victim() noexcept {
    uint32_t best = kNone;
    for (uint32_t e = 0; e < entries_.size(); ++e) {
        const Entry& en = entries_[e];
        if (slots_.lost(e)) continue;
        if (!en.valid) return e;
        if (en.in_use == 0 && (best == kNone || en.last_use < entries_[best].last_use)) best = e;
    }
    if (best != kNone) {
        drop(best);
        stats_.pool_evictions.add();
    }
    return best;
}

bool PersistentGrantPool::map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
                              iovec& out) noexcept {
    const uint64_t ref64 = addr >> kGrantPageShift;
    uint32_t e = ref64 < entry_of_ref_.size() ? entry_of_ref_[ref64] : kNone;
    PinnedGrant g;
    if (e != kNone) {
        // Held since first use: the frontend cannot have revoked it (its
        // end_access fails on our pin), so only this request is checked.
        Entry& en = entries_[e];
        const auto offset = static_cast<uint32_t>(addr & (kGrantPageBytes - 1));
        GrantError bad = GrantError::Count;
        if (len == 0) bad = GrantError::ZeroLength;
        else if (len > kGrantPageBytes - offset) bad = GrantError::CrossesPage;
        else if (writable && !en.g.write) bad = GrantError::ReadOnly;
        if (bad != GrantError::Count) {
            src_.refs->count(bad);
            return false;
        }
        stats_.pool_hits.add();
        g = en.g;
        g.offset = offset;
        g.write = writable;  // which of the chain's bytes are written
    } else {
        // Held for reading, and for writing too unless the grant is
        // read-only: one mapping then serves both directions, as long as kept.
        auto pinned = src_.refs->pin(addr, len, false);
        if (!pinned) return false;
        const bool rw = !pinned->readonly;
        if (writable && !rw) {
            src_.refs->unpin(pinned->ref, false);
            src_.refs->count(GrantError::ReadOnly);
            return false;
        }
        const auto release_pins = [&] {
            src_.refs->unpin(pinned->ref, false);
            if (rw) src_.refs->unpin(pinned->ref, true);
        };
        if (rw && !src_.refs->pin(addr, len, true)) {
            src_.refs->unpin(pinned->ref, false);
            return false;
        }
        pinned->write = rw;
        e = victim();
        if (e == kNone) {
            release_pins();
            src_.refs->count(GrantError::PoolFull);
            return false;
        }
        if (!slots_.ok() || !slots_.map(e, src_.data_fd, pinned->frame, rw)) {
            release_pins();
            src_.refs->count(GrantError::SystemError);
            return false;
        }
        stats_.pool_misses.add();
        stats_.map_syscalls.add();
        entries_[e] = Entry{*pinned, 0, 0, true};
        entry_of_ref_[pinned->ref] = e;
        ++mapped_;
        g = *pinned;
        g.write = writable;
    }
    const uint32_t i = add_seg(head);
    if (i == kNone) return false;
    Entry& en = entries_[e];
    ++en.in_use;
    en.last_use = ++clock_;
    stats_.maps.add();
    segs_[i] = Seg{g, len, e};
    out = iovec{slots_.page(e) + g.offset, len};
    return true;
}

void PersistentGrantPool::release(Seg& s, uint32_t) noexcept {
    Entry& en = entries_[s.slot];
    if (en.in_use > 0) --en.in_use;
}

}  // namespace pvnet::mem
