// MemoryTable::translate against a byte-by-byte model over random region
// maps at bases from 0 up to the top of the 64-bit space: pieces and errors agree.
#include "pvnet/mem/memory_table.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "memory_table_fixture.h"

namespace pvnet::mem::table_test {
namespace {

struct ModelRegion {
    uint64_t gpa;
    uint64_t size;
    std::byte* host;
    Access access;
};

class Model {
public:
    explicit Model(std::vector<ModelRegion> regions) : regions_(std::move(regions)) {}

    static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

    // Index of the region holding byte `x` by linear search, or kNone.
    std::size_t owner(uint64_t x) const {
        for (std::size_t i = 0; i < regions_.size(); ++i) {
            if (x >= regions_[i].gpa && x - regions_[i].gpa < regions_[i].size) return i;
        }
        return kNone;
    }
    const ModelRegion& region(std::size_t i) const { return regions_[i]; }

private:
    std::vector<ModelRegion> regions_;
};

struct Expected {
    std::set<MemError> errors;  // every error that applies; empty = success
    std::vector<iovec> pieces;
};

// Walks [gpa, gpa+len) byte by byte. Bytes outside [lo, hi] are known to be
// unmapped (all regions lie inside), so the walk is clipped to that window.
Expected model_translate(const Model& m, uint64_t lo, uint64_t hi, uint64_t gpa, uint64_t len,
                         Access access, std::size_t slots) {
    Expected e;
    if (len == 0) {
        e.errors.insert(MemError::ZeroLength);
        return e;
    }
    if (gpa > kU64Max - (len - 1)) {
        e.errors.insert(MemError::AddrOverflow);
        return e;
    }
    const uint64_t last = gpa + (len - 1);
    if (gpa < lo || last > hi) e.errors.insert(MemError::AddrUnmapped);
    const uint64_t from = std::max(gpa, lo);
    const uint64_t to = std::min(last, hi);
    std::size_t cur = Model::kNone;  // region of the piece being grown
    for (uint64_t x = from; from <= to; ++x) {  // `to` may be the top byte: stop by break
        const std::size_t o = m.owner(x);
        if (o == Model::kNone) {
            e.errors.insert(MemError::AddrUnmapped);
            cur = Model::kNone;
        } else {
            const ModelRegion& r = m.region(o);
            if (!allows(r.access, access)) e.errors.insert(MemError::AccessDenied);
            if (cur == o) {
                ++e.pieces.back().iov_len;  // same region: the piece grows by one byte
            } else {
                e.pieces.push_back(iovec{r.host + (x - r.gpa), 1});
                cur = o;
            }
        }
        if (x == to) break;
    }
    if (e.pieces.size() > slots) e.errors.insert(MemError::TooManyPieces);
    return e;
}

TEST(MemoryTableProperty, TranslateMatchesByteByByteModel) {
    constexpr uint64_t kSpace = 3000;  // regions live in [base, base + kSpace)
    constexpr uint64_t kTopBase = 0 - kSpace;  // base + kSpace == 2^64
    const uint64_t bases[] = {0, 0xFFFF'F000, 0x7fff'ffff'ffff'ff00ull, kU64Max - kSpace, kTopBase};
    int top_region_successes = 0;
    const Access accesses[] = {Access::Read, Access::Write, Access::ReadWrite};
    int successes = 0;
    int multi_piece = 0;

    for (uint32_t seed = 1; seed <= 32; ++seed) {
        SCOPED_TRACE(seed);
        std::mt19937_64 rng(seed);
        auto uni = [&](uint64_t lo, uint64_t hi) {
            return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
        };
        const uint64_t base = bases[seed % std::size(bases)];

        // Lay out non-overlapping regions, often adjacent, in gpa order.
        Backing backing;
        std::vector<ModelRegion> regions;
        uint64_t cursor = uni(0, 40);
        while (regions.size() < MemoryTable::kMaxRegions) {
            const uint64_t size = uni(1, 200);
            if (cursor + size > kSpace) break;
            const Access acc = uni(0, 3) == 0 ? accesses[uni(0, 2)] : Access::ReadWrite;
            regions.push_back({base + cursor, size, backing.get(size).data(), acc});
            cursor += size;
            if (uni(0, 2) != 0) cursor += uni(1, 50);  // a hole, else adjacent
        }
        // At the top base, the last region ends exactly at 2^64.
        if (base == kTopBase && cursor < kSpace && regions.size() < MemoryTable::kMaxRegions) {
            const uint64_t size = kSpace - cursor;
            regions.push_back({base + cursor, size, backing.get(size).data(), Access::ReadWrite});
        }
        ASSERT_FALSE(regions.empty());

        // Add them in random order.
        std::vector<ModelRegion> shuffled = regions;
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
        MemoryTable table;
        for (const ModelRegion& r : shuffled) {
            ASSERT_TRUE(table.add(GuestAddr(r.gpa), std::span<std::byte>(r.host, r.size), r.access)
                            .has_value());
        }
        const Model model(regions);
        const uint64_t lo = base;
        const uint64_t hi = base + kSpace - 1;

        std::array<iovec, 5> out{};
        for (int q = 0; q < 250; ++q) {
            uint64_t gpa = base + uni(0, kSpace + 64) - 32;  // may wrap below 0
            uint64_t len = 0;
            switch (uni(0, 9)) {
                case 0: len = 0; break;
                case 1: len = kU64Max - uni(0, 4096); break;
                case 2: gpa = regions[uni(0, regions.size() - 1)].gpa; [[fallthrough]];
                case 3: len = uni(1, 600); break;
                case 4: {
                    // From inside the highest region to 2^64 - 1, 2^64 or past it.
                    const ModelRegion& top = regions.back();
                    gpa = top.gpa + uni(0, top.size - 1);
                    len = (0 - gpa) - 1 + uni(0, 2);
                    break;
                }
                default: len = uni(1, 120); break;
            }
            const Access access = accesses[uni(0, 2)];
            const std::size_t slots = uni(0, out.size());
            SCOPED_TRACE(testing::Message() << std::hex << "gpa=" << gpa << " len=" << len
                                            << " slots=" << slots);

            const Expected e = model_translate(model, lo, hi, gpa, len, access, slots);
            auto r = table.translate(GuestAddr(gpa), len, access, std::span(out.data(), slots));
            if (e.errors.empty()) {
                ASSERT_TRUE(r.has_value()) << "unexpected error";
                ASSERT_EQ(*r, e.pieces.size());
                for (std::size_t i = 0; i < e.pieces.size(); ++i) {
                    EXPECT_EQ(out[i].iov_base, e.pieces[i].iov_base) << "piece " << i;
                    EXPECT_EQ(out[i].iov_len, e.pieces[i].iov_len) << "piece " << i;
                }
                ++successes;
                if (e.pieces.size() > 1) ++multi_piece;
                if (gpa + (len - 1) == kU64Max) ++top_region_successes;
            } else {
                ASSERT_FALSE(r.has_value()) << "accepted a bad range";
                EXPECT_TRUE(e.errors.count(r.error()) == 1)
                    << "error " << to_string(r.error()) << " not among the applicable ones";
            }

            // The contiguous form: success iff one piece and no other error.
            const Expected c = model_translate(model, lo, hi, gpa, len, access, 1);
            auto rc = table.translate_contiguous(GuestAddr(gpa), len, access);
            if (c.errors.empty()) {
                ASSERT_TRUE(rc.has_value());
                EXPECT_EQ(static_cast<void*>(*rc), c.pieces[0].iov_base);
            } else {
                ASSERT_FALSE(rc.has_value());
                const MemError want = rc.error() == MemError::CrossesRegion
                                          ? MemError::TooManyPieces
                                          : rc.error();
                EXPECT_TRUE(c.errors.count(want) == 1) << to_string(rc.error());
            }
        }
    }
    // The generator must actually reach the interesting cases.
    EXPECT_GT(successes, 1000) << successes;
    EXPECT_GT(multi_piece, 100) << multi_piece;
    EXPECT_GT(top_region_successes, 10) << "too few ranges ending at 2^64 translated";
}

}  // namespace
}  // namespace pvnet::mem::table_test
