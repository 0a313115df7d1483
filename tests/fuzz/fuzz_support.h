// What the fuzz targets share (STYLE.md §11 "Fuzz"): the invariant check,
// the input reader, guarded guest memory mirrored for a model, and the
// brute-force translation those models check MemoryTable against.
//
// Header-only: each target is one source file, built both as a libFuzzer
// binary (clang) and as a corpus replay (g++).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "pvnet/mem/guest_addr.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/virtio/virtio_ring.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/util/result.h"
#include "pvnet/virtio/le.h"

namespace pvnet::fuzz {

/// A descriptor with every field set (the spec's field order).
inline virtio::virtq_desc make_desc(uint64_t addr, uint32_t len, uint16_t flags,
                                    uint16_t next) noexcept {
    virtio::virtq_desc d{};
    d.addr.set(addr);
    d.len.set(len);
    d.flags.set(flags);
    d.next.set(next);
    return d;
}

/// Invariant violated: stop here, so libFuzzer (or the replay) reports the input.
[[noreturn]] inline void fail() { __builtin_trap(); }
inline void check(bool ok) {
    if (!ok) fail();
}

/// check() that first names the condition and its place on stderr, so a
/// crash report (or a replay) says which invariant broke. FUZZ_CHECK(cond).
[[gnu::cold, noreturn]] inline void fail_at(const char* what, const char* file, int line) {
    std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", what, file, line);
    fail();
}
inline void check_at(bool ok, const char* what, const char* file, int line) {
    if (!ok) fail_at(what, file, line);
}
#define FUZZ_CHECK(cond) ::pvnet::fuzz::check_at(static_cast<bool>(cond), #cond, __FILE__, __LINE__)

/// Reads the input front to back; past the end every value is zero, so any
/// prefix of an input is itself a valid input.
class Reader {
public:
    Reader(const uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
    bool empty() const { return p_ == end_; }
    uint8_t u8() { return p_ == end_ ? 0 : *p_++; }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    uint32_t u32() { return static_cast<uint32_t>(u16() | (uint32_t{u16()} << 16)); }
    uint64_t u64() { return u32() | (uint64_t{u32()} << 32); }

private:
    const uint8_t* p_;
    const uint8_t* end_;
};

/// A setup call's result checked against what the input asked for: failure
/// with `want`, or success when `want` is E::Count. The value made, else T{}.
template <typename T, typename E>
T expect_setup(Result<T, E> r, E want) {
    if (want != E::Count) {
        check(!r.has_value() && r.error() == want);
        return T{};
    }
    check(r.has_value());
    return std::move(r.value());
}

/// Truncation to a 16-bit ring index, spelled once.
inline uint16_t u16_of(uint32_t v) { return static_cast<uint16_t>(v); }

/// A zero-filled memfd region of exactly `bytes` (a page multiple), with
/// PROT_NONE guard pages on both sides, so a stray access faults.
inline mem::MemoryRegion guarded_region(std::size_t bytes, const char* name) {
    auto r = mem::MemoryRegion::create(bytes, name);
    check(r.has_value() && r->size() == bytes);
    return std::move(r.value());
}

/// A region as a model sees it: gpa range, host base, access.
struct ModelRegion {
    uint64_t gpa = 0;
    uint64_t size = 0;
    std::byte* host = nullptr;
    mem::Access access = mem::Access::ReadWrite;
};

/// The first region in `regions` holding byte `addr`, by a plain scan.
inline const ModelRegion* holding(std::span<const ModelRegion> regions, uint64_t addr) {
    for (const ModelRegion& r : regions) {
        if (addr >= r.gpa && addr - r.gpa < r.size) return &r;
    }
    return nullptr;
}

/// Why a brute-force translation stopped.
enum class ModelFault { None, Unmapped, AccessDenied, TooManyPieces };

/// Brute-force translation by scanning every region: appends the pieces of
/// [gpa, gpa + len) to out[n...], one per region crossed. The caller has
/// checked that len > 0 and that the range does not wrap.
inline ModelFault model_pieces(std::span<const ModelRegion> regions, uint64_t gpa, uint64_t len,
                               mem::Access access, std::span<iovec> out, std::size_t& n) {
    uint64_t addr = gpa;
    uint64_t left = len;
    while (left > 0) {
        const ModelRegion* r = holding(regions, addr);
        if (r == nullptr) return ModelFault::Unmapped;
        if (!mem::allows(r->access, access)) return ModelFault::AccessDenied;
        if (n == out.size()) return ModelFault::TooManyPieces;
        const uint64_t off = addr - r->gpa;
        const uint64_t chunk = left < r->size - off ? left : r->size - off;
        out[n++] = iovec{r->host + off, static_cast<std::size_t>(chunk)};
        addr += chunk;
        left -= chunk;
    }
    return ModelFault::None;
}

/// Reads the first and last byte of a piece, and writes them back when
/// `access` is Write: an access outside the mapping faults on a guard page.
inline void touch(const iovec& v, mem::Access access = mem::Access::Read) {
    auto* p = static_cast<volatile std::byte*>(v.iov_base);
    const std::byte first = p[0];
    const std::byte last = p[v.iov_len - 1];
    if (access == mem::Access::Write) {
        p[0] = first;
        p[v.iov_len - 1] = last;
    }
}

/// Guest memory for one fuzz process: guarded regions added to a
/// MemoryTable and mirrored as ModelRegions. The first region added is
/// where a target lays out its ring; at/load/store address it by gpa.
class GuestMemory {
public:
    void add(uint64_t gpa, std::size_t bytes, mem::Access access, const char* name) {
        mem::MemoryRegion r = guarded_region(bytes, name);
        check(table_.add(mem::GuestAddr(gpa), r.bytes(), access).has_value());
        regions_.push_back(ModelRegion{gpa, bytes, r.host(), access});
        backing_.push_back(std::move(r));
    }

    const mem::MemoryTable& table() const { return table_; }
    std::span<const ModelRegion> regions() const { return regions_; }

    /// Host address of `gpa` inside the first region.
    std::byte* at(uint64_t gpa) const { return regions_[0].host + (gpa - regions_[0].gpa); }

    /// A little-endian ring word at `gpa` in the first region.
    template <typename T>
    T load(uint64_t gpa) const {
        T v;
        std::memcpy(&v, at(gpa), sizeof v);
        return virtio::le_to_host(v);
    }
    template <typename T>
    void store(uint64_t gpa, T v) const {
        v = virtio::host_to_le(v);
        std::memcpy(at(gpa), &v, sizeof v);
    }

private:
    std::vector<mem::MemoryRegion> backing_;
    std::vector<ModelRegion> regions_;
    mem::MemoryTable table_;
};

/// The split ring image both split-ring targets lay out at the start of
/// region A: descriptor table, avail ring and used ring for up to 256 entries.
inline constexpr uint64_t kAGpa = 0x10000;
inline constexpr std::size_t kABytes = 0x10000;
inline constexpr uint64_t kDescGpa = 0x10000;
inline constexpr uint64_t kAvailGpa = 0x11000;
inline constexpr uint64_t kUsedGpa = 0x11400;
inline constexpr uint16_t kMaxSize = 256;

}  // namespace pvnet::fuzz
