// Fuzz target: MemoryTable::add / translate / translate_contiguous against a
// brute-force model (STYLE.md §4 "GuestAddr ... overflow-checked, the whole
// range checked, one piece per region crossed"; §11 "Fuzz").
//
// Input: up to 8 region adds (gpa, size, access over slices of three small
// guarded MemoryRegions; overlaps, zero sizes and wrapping ends included),
// then up to 64 translations of ranges biased towards region edges, the top
// of the address space (a region may end exactly at 2^64, a range may not
// cross it) and the gaps between regions. Every outcome - the error of each
// add, the pieces or the error of each translation - must equal
// the model's, and every piece is touched, so an escape hits a guard page.
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"

namespace pvnet::fuzz {
namespace {

using mem::Access;
using mem::GuestAddr;
using mem::MemError;
using mem::MemoryRegion;
using mem::MemoryTable;

constexpr std::size_t kBackings = 3;
constexpr std::size_t kBackingBytes = 4 * 4096;
constexpr std::size_t kMaxAdds = 8;
constexpr std::size_t kMaxOps = 64;
constexpr std::size_t kMaxPieces = 10;

/// Three guarded memfd regions, made once per process.
const std::vector<MemoryRegion>& backings() {
    static const std::vector<MemoryRegion> b = [] {
        std::vector<MemoryRegion> v;
        for (std::size_t i = 0; i < kBackings; ++i) {
            v.push_back(guarded_region(kBackingBytes, "fuzz-mem"));
        }
        return v;
    }();
    return b;
}

/// What translate() must return: an error, or these pieces.
struct Expect {
    bool ok = false;
    MemError error = MemError::Count;
    std::array<iovec, kMaxPieces> pieces{};
    std::size_t n = 0;
};

Expect model_translate(const std::vector<ModelRegion>& m, uint64_t gpa, uint64_t len,
                       Access access, std::size_t cap) {
    Expect e;
    if (len == 0) {
        e.error = MemError::ZeroLength;
        return e;
    }
    // The last byte must be addressable: gpa + len - 1 <= 2^64 - 1.
    if (len - 1 > UINT64_MAX - gpa) {
        e.error = MemError::AddrOverflow;
        return e;
    }
    const std::span<iovec> out(e.pieces.data(), cap);
    switch (model_pieces(m, gpa, len, access, out, e.n)) {
        case ModelFault::None: e.ok = true; break;
        case ModelFault::Unmapped: e.error = MemError::AddrUnmapped; break;
        case ModelFault::AccessDenied: e.error = MemError::AccessDenied; break;
        case ModelFault::TooManyPieces: e.error = MemError::TooManyPieces; break;
    }
    return e;
}

Access decode_access(uint8_t b) { return static_cast<Access>(b % 3 + 1); }

/// One of the regions added so far (by add order), or null; always reads a byte.
const ModelRegion* pick(Reader& r, const std::vector<ModelRegion>& m) {
    const uint8_t b = r.u8();
    return m.empty() ? nullptr : &m[b % m.size()];
}

/// A region's gpa, biased towards neighbours of earlier regions and the top of
/// the address space.
uint64_t decode_region_gpa(Reader& r, const std::vector<ModelRegion>& m, uint64_t size) {
    const ModelRegion* prev = pick(r, m);
    const uint8_t kind = r.u8() % 8;
    switch (kind) {
        case 0: return uint64_t{r.u16()} * 16;
        case 1:  // right after (or overlapping the end of) an earlier region
            return prev ? prev->gpa + prev->size + static_cast<uint64_t>(int64_t{int8_t(r.u8())})
                        : r.u16();
        case 2:  // right before (or overlapping the start of) an earlier region
            return prev ? prev->gpa - size + static_cast<uint64_t>(int64_t{int8_t(r.u8())})
                        : r.u32();
        case 3: return UINT64_MAX - r.u16();
        case 4: return 0 - size - (r.u8() % 2);  // ends exactly at 2^64 (allowed) or just below
        case 5: return r.u64();
        case 6: return prev ? prev->gpa + r.u16() % prev->size : r.u16();
        default: return r.u32();
    }
}

uint64_t decode_range_gpa(Reader& r, const std::vector<ModelRegion>& m) {
    const ModelRegion* reg = pick(r, m);
    const uint8_t kind = r.u8() % 7;
    switch (kind) {
        case 0: return reg ? reg->gpa : 0;
        case 1: return reg ? reg->gpa + static_cast<uint64_t>(int64_t{int16_t(r.u16())}) : 0;
        case 2: return reg ? reg->gpa + reg->size - 1 - r.u8() : 0;
        case 3: return UINT64_MAX - r.u16();
        case 4: return uint64_t{r.u16()} * 16;
        case 5: return r.u64();
        default: return reg ? reg->gpa + reg->size + static_cast<uint64_t>(int64_t{int8_t(r.u8())})
                            : r.u32();
    }
}

uint64_t decode_len(Reader& r, const std::vector<ModelRegion>& m, uint64_t gpa) {
    const uint8_t kind = r.u8() % 7;
    switch (kind) {
        case 0: return 0;
        case 1: return 1 + r.u8();
        case 2: return r.u16();
        case 3: return r.u32();
        case 4: return r.u64();
        case 5: return UINT64_MAX - gpa + r.u8() % 3;  // ends at, or wraps past, 2^64
        default: {
            // Up to the end of a region, plus a little: crosses into the next one.
            const ModelRegion* reg = pick(r, m);
            if (reg == nullptr) return r.u16();
            return reg->gpa + reg->size - gpa + r.u8();
        }
    }
}

void check_sorted(const MemoryTable& t, const std::vector<ModelRegion>& m) {
    check(t.size() == m.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
        const auto& a = t.region(i);
        if (i > 0) {
            const auto& p = t.region(i - 1);
            // By last byte: a region's end may be 2^64, which wraps to 0.
            check(p.gpa.value + (p.size_bytes - 1) < a.gpa.value);
        }
        bool found = false;
        for (const ModelRegion& r : m) {
            found |= r.gpa == a.gpa.value && r.size == a.size_bytes && r.host == a.host &&
                     r.access == a.access;
        }
        check(found);
    }
}

/// One input: decode it and check every call against the model.
int run_input(const uint8_t* data, std::size_t size) {
    const std::vector<MemoryRegion>& b = backings();
    Reader r(data, size);
    MemoryTable table;
    std::vector<ModelRegion> model;

    const std::size_t adds = r.u8() % (kMaxAdds + 1);
    for (std::size_t i = 0; i < adds; ++i) {
        const MemoryRegion& back = b[r.u8() % kBackings];
        const std::size_t host_off = r.u16() % kBackingBytes;
        const std::size_t len = r.u16() % (kBackingBytes - host_off + 1);  // 0 allowed
        const uint64_t gpa = decode_region_gpa(r, model, len);
        const Access access = decode_access(r.u8());
        // host_off < kBackingBytes, so the pointer is inside the mapping even for len 0.
        const std::span<std::byte> host(back.host() + host_off, len);

        MemError want = MemError::Count;
        // The last byte must be addressable; the end may be 2^64 exactly.
        if (len == 0 || len - 1 > UINT64_MAX - gpa) {
            want = MemError::BadRegion;
        } else {
            for (const ModelRegion& m : model) {
                // Overlap of [gpa, gpa+len-1] and [m.gpa, m.gpa+m.size-1]: no last byte wraps.
                if (gpa <= m.gpa + (m.size - 1) && m.gpa <= gpa + (len - 1)) {
                    want = MemError::RegionOverlap;
                }
            }
        }
        auto s = table.add(GuestAddr(gpa), host, access);
        if (want == MemError::Count) {
            check(s.has_value());
            model.push_back(ModelRegion{gpa, len, host.data(), access});
        } else {
            check(!s.has_value() && s.error() == want);
        }
        check_sorted(table, model);
    }

    for (std::size_t op = 0; op < kMaxOps && !r.empty(); ++op) {
        const uint8_t kind = r.u8();
        const Access access = decode_access(r.u8());
        const uint64_t gpa = decode_range_gpa(r, model);
        const uint64_t len = decode_len(r, model, gpa);

        if (kind & 1) {
            // translate_contiguous: one piece or CrossesRegion.
            Expect e = model_translate(model, gpa, len, access, 1);
            auto got = table.translate_contiguous(GuestAddr(gpa), len, access);
            if (e.ok) {
                check(got.has_value() && *got == e.pieces[0].iov_base);
                touch(e.pieces[0]);
            } else {
                const MemError want =
                    e.error == MemError::TooManyPieces ? MemError::CrossesRegion : e.error;
                check(!got.has_value() && got.error() == want);
            }
            continue;
        }

        const std::size_t cap = (kind >> 1) % (kMaxPieces + 1);
        Expect e = model_translate(model, gpa, len, access, cap);
        std::array<iovec, kMaxPieces + 1> out{};
        // A sentinel past `cap` must survive: translate writes only inside its span.
        const iovec sentinel{reinterpret_cast<void*>(uintptr_t{0x5a5a}), 0x5a5a};
        for (iovec& v : out) v = sentinel;
        auto got = table.translate(GuestAddr(gpa), len, access, std::span<iovec>(out.data(), cap));
        for (std::size_t i = cap; i < out.size(); ++i) {
            check(out[i].iov_base == sentinel.iov_base && out[i].iov_len == sentinel.iov_len);
        }
        if (!e.ok) {
            check(!got.has_value() && got.error() == e.error);
            continue;
        }
        check(got.has_value() && *got == e.n);
        uint64_t sum = 0;
        for (std::size_t i = 0; i < e.n; ++i) {
            check(out[i].iov_base == e.pieces[i].iov_base && out[i].iov_len == e.pieces[i].iov_len);
            check(out[i].iov_len > 0);
            // Each piece inside the host span of one region with the access asked for.
            bool inside = false;
            for (const ModelRegion& m : model) {
                const auto* p = static_cast<const std::byte*>(out[i].iov_base);
                inside |= p >= m.host && out[i].iov_len <= m.size &&
                          static_cast<std::size_t>(p - m.host) <= m.size - out[i].iov_len &&
                          pvnet::mem::allows(m.access, access);
            }
            check(inside);
            touch(out[i]);
            sum += out[i].iov_len;
        }
        check(sum == len);
    }
    return 0;
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    return pvnet::fuzz::run_input(data, size);
}
