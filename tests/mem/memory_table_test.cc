// MemoryTable: guest-physical to host translation. Every byte of a range is
// checked, addr + len never wraps, one piece per region crossed; add() keeps
// the map free of overlaps and bad regions. The model property is in
// memory_table_model_test.cc.
#include "pvnet/mem/memory_table.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "memory_table_fixture.h"

namespace pvnet::mem::table_test {
namespace {

std::byte* base_of(const iovec& v) { return static_cast<std::byte*>(v.iov_base); }

class MemoryTableTest : public ::testing::Test {
protected:
    std::span<std::byte> add_ok(uint64_t gpa, std::size_t bytes,
                                Access access = Access::ReadWrite) {
        std::span<std::byte> host = backing_.get(bytes);
        auto s = table_.add(GuestAddr(gpa), host, access);
        EXPECT_TRUE(s.has_value()) << "add(" << std::hex << gpa << ", " << bytes << ")";
        return host;
    }

    Result<std::size_t, MemError> translate(uint64_t gpa, uint64_t len,
                                            Access access = Access::Read) {
        return table_.translate(GuestAddr(gpa), len, access, std::span<iovec>(out_));
    }

    Backing backing_;
    MemoryTable table_;
    std::array<iovec, 4> out_{};
};

// ---------------------------------------------------------------------------
// translate: one region

TEST_F(MemoryTableTest, TranslatesRangeInsideOneRegion) {
    auto host = add_ok(0x10000, 0x4000);
    auto r = translate(0x10100, 0x200);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(*r, 1u);
    EXPECT_EQ(base_of(out_[0]), host.data() + 0x100);
    EXPECT_EQ(out_[0].iov_len, 0x200u);
}

TEST_F(MemoryTableTest, TranslatesRangeEndingExactlyAtRegionEnd) {
    auto host = add_ok(0x10000, 0x4000);
    auto r = translate(0x13f00, 0x100);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(*r, 1u);
    EXPECT_EQ(base_of(out_[0]), host.data() + 0x3f00);
    EXPECT_EQ(out_[0].iov_len, 0x100u);

    auto whole = translate(0x10000, 0x4000);
    ASSERT_TRUE(whole.has_value());
    ASSERT_EQ(*whole, 1u);
    EXPECT_EQ(base_of(out_[0]), host.data());
    EXPECT_EQ(out_[0].iov_len, 0x4000u);

    auto last = translate(0x13fff, 1);
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(base_of(out_[0]), host.data() + 0x3fff);
}

TEST_F(MemoryTableTest, RejectsRangeRunningOnePastRegionEnd) {
    add_ok(0x10000, 0x4000);
    auto r = translate(0x13f00, 0x101);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::AddrUnmapped);
    auto whole_plus_one = translate(0x10000, 0x4001);
    ASSERT_FALSE(whole_plus_one.has_value());
    EXPECT_EQ(whole_plus_one.error(), MemError::AddrUnmapped);
}

TEST_F(MemoryTableTest, RejectsRangeStartingInUnmappedSpace) {
    add_ok(0x10000, 0x4000);
    for (uint64_t gpa : {uint64_t{0}, uint64_t{0xffff}, uint64_t{0x14000}, uint64_t{0x20000}}) {
        auto r = translate(gpa, 0x10);
        ASSERT_FALSE(r.has_value()) << std::hex << gpa;
        EXPECT_EQ(r.error(), MemError::AddrUnmapped) << std::hex << gpa;
    }
    // Starts just before the region and runs into it: the first byte is unmapped.
    auto r = translate(0xffff, 0x2);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::AddrUnmapped);
}

TEST_F(MemoryTableTest, EmptyTableMapsNothing) {
    auto r = translate(0x1000, 1);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::AddrUnmapped);
}

TEST_F(MemoryTableTest, RejectsZeroLength) {
    add_ok(0x10000, 0x4000);
    for (uint64_t gpa : {uint64_t{0x10000}, uint64_t{0x12345}, uint64_t{0}, kU64Max}) {
        auto r = translate(gpa, 0);
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error(), MemError::ZeroLength);
    }
    auto c = table_.translate_contiguous(GuestAddr(0x10000), 0, Access::Read);
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error(), MemError::ZeroLength);
}

// ---------------------------------------------------------------------------
// translate: overflow at the top of the address space

TEST_F(MemoryTableTest, RejectsRangeWrappingPast2To64) {
    // A region in the last page (one byte short: its exclusive end must fit).
    auto host = add_ok(0xFFFF'FFFF'FFFF'F000, 0xfff);

    auto r = translate(0xFFFF'FFFF'FFFF'F000, 0x2000);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::AddrOverflow);

    auto r2 = translate(kU64Max, 2);
    ASSERT_FALSE(r2.has_value());
    EXPECT_EQ(r2.error(), MemError::AddrOverflow);

    auto r3 = translate(0xFFFF'FFFF'FFFF'F000, kU64Max);
    ASSERT_FALSE(r3.has_value());
    EXPECT_EQ(r3.error(), MemError::AddrOverflow);

    auto r4 = translate(2, kU64Max);
    ASSERT_FALSE(r4.has_value());
    EXPECT_EQ(r4.error(), MemError::AddrOverflow);

    // The region itself still translates; a range ending at the last byte of
    // the address space does not wrap (it is merely unmapped there).
    auto ok = translate(0xFFFF'FFFF'FFFF'F000, 0xfff);
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(base_of(out_[0]), host.data());
    EXPECT_EQ(out_[0].iov_len, 0xfffu);
    auto top = translate(0xFFFF'FFFF'FFFF'F000, 0x1000);
    ASSERT_FALSE(top.has_value());
    EXPECT_EQ(top.error(), MemError::AddrUnmapped);
    auto full = translate(0, kU64Max);
    ASSERT_FALSE(full.has_value());
    EXPECT_EQ(full.error(), MemError::AddrUnmapped);
}

TEST_F(MemoryTableTest, HugeLengthFromMappedStartIsRejectedNotTruncated) {
    add_ok(0x10000, 0x4000);
    for (uint64_t len : {uint64_t{0x1'0000'0000}, kU64Max - 0x10000, kU64Max / 2}) {
        auto r = translate(0x10000, len);
        ASSERT_FALSE(r.has_value()) << std::hex << len;
        EXPECT_EQ(r.error(), MemError::AddrUnmapped) << std::hex << len;
    }
}

// ---------------------------------------------------------------------------
// translate: several regions

TEST_F(MemoryTableTest, RangeOverTwoAdjacentRegionsGivesTwoPieces) {
    auto a = add_ok(0x1000, 0x2000);
    auto b = add_ok(0x3000, 0x2000);
    std::array<iovec, 2> two{};
    auto r = table_.translate(GuestAddr(0x2800), 0x1000, Access::Read, two);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(*r, 2u);
    EXPECT_EQ(base_of(two[0]), a.data() + 0x1800);
    EXPECT_EQ(two[0].iov_len, 0x800u);
    EXPECT_EQ(base_of(two[1]), b.data());
    EXPECT_EQ(two[1].iov_len, 0x800u);

    // Exactly both regions, end to end.
    auto all = table_.translate(GuestAddr(0x1000), 0x4000, Access::ReadWrite, two);
    ASSERT_TRUE(all.has_value());
    ASSERT_EQ(*all, 2u);
    EXPECT_EQ(base_of(two[0]), a.data());
    EXPECT_EQ(two[0].iov_len, 0x2000u);
    EXPECT_EQ(base_of(two[1]), b.data());
    EXPECT_EQ(two[1].iov_len, 0x2000u);

    // A range ending exactly at the boundary stays one piece.
    auto one = table_.translate(GuestAddr(0x2000), 0x1000, Access::Read, two);
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(*one, 1u);
    // One starting exactly at the boundary too, and lands in the second region.
    auto second = table_.translate(GuestAddr(0x3000), 0x10, Access::Read, two);
    ASSERT_TRUE(second.has_value());
    EXPECT_EQ(*second, 1u);
    EXPECT_EQ(base_of(two[0]), b.data());
}

TEST_F(MemoryTableTest, RangeOverTwoRegionsWithOneSlotIsTooManyPieces) {
    add_ok(0x1000, 0x2000);
    add_ok(0x3000, 0x2000);
    std::array<iovec, 1> one{};
    auto r = table_.translate(GuestAddr(0x2800), 0x1000, Access::Read, one);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::TooManyPieces);
}

TEST_F(MemoryTableTest, RangeOverThreeRegionsWithTwoSlotsIsTooManyPieces) {
    auto a = add_ok(0x1000, 0x1000);
    auto b = add_ok(0x2000, 0x1000);
    auto c = add_ok(0x3000, 0x1000);
    std::array<iovec, 2> two{};
    auto r = table_.translate(GuestAddr(0x1800), 0x2000, Access::Read, two);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::TooManyPieces);

    std::array<iovec, 3> three{};
    auto ok = table_.translate(GuestAddr(0x1800), 0x2000, Access::Read, three);
    ASSERT_TRUE(ok.has_value());
    ASSERT_EQ(*ok, 3u);
    EXPECT_EQ(base_of(three[0]), a.data() + 0x800);
    EXPECT_EQ(three[0].iov_len, 0x800u);
    EXPECT_EQ(base_of(three[1]), b.data());
    EXPECT_EQ(three[1].iov_len, 0x1000u);
    EXPECT_EQ(base_of(three[2]), c.data());
    EXPECT_EQ(three[2].iov_len, 0x800u);
}

TEST_F(MemoryTableTest, EmptyOutputSpanIsTooManyPiecesForAnyMappedRange) {
    add_ok(0x1000, 0x1000);
    auto r = table_.translate(GuestAddr(0x1000), 1, Access::Read, std::span<iovec>());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::TooManyPieces);
}

TEST_F(MemoryTableTest, RangeOverAHoleBetweenRegionsIsUnmapped) {
    add_ok(0x1000, 0x1000);
    add_ok(0x2001, 0x1000);  // one-byte hole at 0x2000
    auto r = translate(0x1f00, 0x200);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::AddrUnmapped);
}

TEST_F(MemoryTableTest, ContiguousTranslationReturnsHostAddress) {
    auto host = add_ok(0x1000, 0x2000);
    auto r = table_.translate_contiguous(GuestAddr(0x1010), 0x100, Access::Read);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, host.data() + 0x10);
}

TEST_F(MemoryTableTest, ContiguousTranslationOverAdjacentPairCrossesRegion) {
    add_ok(0x1000, 0x2000);
    add_ok(0x3000, 0x2000);
    auto r = table_.translate_contiguous(GuestAddr(0x2ff0), 0x20, Access::Read);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), MemError::CrossesRegion);
    auto unmapped = table_.translate_contiguous(GuestAddr(0x4ff0), 0x20, Access::Read);
    ASSERT_FALSE(unmapped.has_value());
    EXPECT_EQ(unmapped.error(), MemError::AddrUnmapped);
    auto overflow = table_.translate_contiguous(GuestAddr(kU64Max), 2, Access::Read);
    ASSERT_FALSE(overflow.has_value());
    EXPECT_EQ(overflow.error(), MemError::AddrOverflow);
}

// ---------------------------------------------------------------------------
// translate: access rights

TEST_F(MemoryTableTest, ReadOnlyRegionRefusesWriteButAllowsRead) {
    auto host = add_ok(0x1000, 0x1000, Access::Read);
    auto w = translate(0x1000, 0x10, Access::Write);
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error(), MemError::AccessDenied);
    auto rw = translate(0x1000, 0x10, Access::ReadWrite);
    ASSERT_FALSE(rw.has_value());
    EXPECT_EQ(rw.error(), MemError::AccessDenied);
    auto rd = translate(0x1000, 0x10, Access::Read);
    ASSERT_TRUE(rd.has_value());
    EXPECT_EQ(base_of(out_[0]), host.data());

    auto cw = table_.translate_contiguous(GuestAddr(0x1000), 0x10, Access::Write);
    ASSERT_FALSE(cw.has_value());
    EXPECT_EQ(cw.error(), MemError::AccessDenied);
}

TEST_F(MemoryTableTest, WriteOnlyRegionRefusesRead) {
    add_ok(0x1000, 0x1000, Access::Write);
    auto rd = translate(0x1000, 0x10, Access::Read);
    ASSERT_FALSE(rd.has_value());
    EXPECT_EQ(rd.error(), MemError::AccessDenied);
    EXPECT_TRUE(translate(0x1000, 0x10, Access::Write).has_value());
}

TEST_F(MemoryTableTest, WriteSpanningIntoReadOnlyNeighbourIsDenied) {
    add_ok(0x1000, 0x1000, Access::ReadWrite);
    add_ok(0x2000, 0x1000, Access::Read);
    auto w = translate(0x1f00, 0x200, Access::Write);
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.error(), MemError::AccessDenied);
    auto rd = translate(0x1f00, 0x200, Access::Read);
    ASSERT_TRUE(rd.has_value());
    EXPECT_EQ(*rd, 2u);
}

// ---------------------------------------------------------------------------
// add()

TEST_F(MemoryTableTest, AddRejectsOverlapOfEveryShape) {
    add_ok(0x10000, 0x1000);  // [0x10000, 0x11000)
    struct Shape {
        const char* what;
        uint64_t gpa;
        std::size_t bytes;
    };
    const Shape shapes[] = {
        {"identical", 0x10000, 0x1000},
        {"inside", 0x10400, 0x100},
        {"covers", 0xf000, 0x3000},
        {"overlaps start", 0xf800, 0x1000},
        {"overlaps end", 0x10800, 0x1000},
        {"same start, longer", 0x10000, 0x2000},
        {"same end, earlier start", 0xf000, 0x2000},
        {"first byte only", 0x10000, 1},
        {"last byte only", 0x10fff, 1},
        {"ends on first byte", 0xff00, 0x101},
        {"starts on last byte", 0x10fff, 0x100},
    };
    for (const Shape& s : shapes) {
        auto st = table_.add(GuestAddr(s.gpa), backing_.get(s.bytes), Access::ReadWrite);
        ASSERT_FALSE(st.has_value()) << s.what;
        EXPECT_EQ(st.error(), MemError::RegionOverlap) << s.what;
    }
    EXPECT_EQ(table_.size(), 1u);
}

TEST_F(MemoryTableTest, AddRejectsRegionOverlappingTwoExisting) {
    add_ok(0x1000, 0x1000);
    add_ok(0x3000, 0x1000);
    auto st = table_.add(GuestAddr(0x1800), backing_.get(0x2000), Access::Read);
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), MemError::RegionOverlap);
    // Filling the gap exactly is fine.
    add_ok(0x2000, 0x1000);
    EXPECT_EQ(table_.size(), 3u);
}

TEST_F(MemoryTableTest, AddAcceptsRegionsTouchingOnEitherSide) {
    add_ok(0x10000, 0x1000);
    add_ok(0x11000, 0x1000);
    add_ok(0xf000, 0x1000);
    EXPECT_EQ(table_.size(), 3u);
}

TEST_F(MemoryTableTest, AddRejectsZeroSizeAndNullHost) {
    auto z = table_.add(GuestAddr(0x1000), std::span<std::byte>(backing_.get(16).data(), 0));
    ASSERT_FALSE(z.has_value());
    EXPECT_EQ(z.error(), MemError::BadRegion);
    auto n = table_.add(GuestAddr(0x1000), std::span<std::byte>());
    ASSERT_FALSE(n.has_value());
    EXPECT_EQ(n.error(), MemError::BadRegion);
    EXPECT_EQ(table_.size(), 0u);
}

TEST_F(MemoryTableTest, AddRejectsRegionWhoseLastBytePasses2To64) {
    auto st = table_.add(GuestAddr(0xFFFF'FFFF'FFFF'F000), backing_.get(0x2000));
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), MemError::BadRegion);
    auto st2 = table_.add(GuestAddr(kU64Max), backing_.get(2));
    ASSERT_FALSE(st2.has_value());
    EXPECT_EQ(st2.error(), MemError::BadRegion);
    auto st3 = table_.add(GuestAddr(0xFFFF'FFFF'FFFF'F001), backing_.get(0x1000));
    ASSERT_FALSE(st3.has_value());
    EXPECT_EQ(st3.error(), MemError::BadRegion);
    EXPECT_EQ(table_.size(), 0u);
}

// ---------------------------------------------------------------------------
// The top of the address space: a region may end exactly at 2^64.

constexpr uint64_t kTopPage = 0 - uint64_t{0x1000};  // 2^64 - 4 KiB

TEST_F(MemoryTableTest, RegionEndingExactlyAt2To64IsAddedAndTranslatesItsLastByte) {
    auto host = add_ok(kTopPage, 0x1000);
    ASSERT_EQ(table_.size(), 1u);
    EXPECT_EQ(table_.region(0).gpa.value, kTopPage);
    EXPECT_EQ(table_.region(0).size_bytes, 0x1000u);

    auto last = translate(kU64Max, 1);
    ASSERT_TRUE(last.has_value());
    ASSERT_EQ(*last, 1u);
    EXPECT_EQ(base_of(out_[0]), host.data() + 0xfff);
    EXPECT_EQ(out_[0].iov_len, 1u);

    auto whole = translate(kTopPage, 0x1000, Access::Write);
    ASSERT_TRUE(whole.has_value());
    ASSERT_EQ(*whole, 1u);
    EXPECT_EQ(base_of(out_[0]), host.data());
    EXPECT_EQ(out_[0].iov_len, 0x1000u);

    auto tail = table_.translate_contiguous(GuestAddr(kU64Max - 15), 16, Access::Read);
    ASSERT_TRUE(tail.has_value());
    EXPECT_EQ(*tail, host.data() + 0xff0);

    const RegionMapping* r = table_.region_of(GuestAddr(kU64Max));
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->host, host.data());
    EXPECT_EQ(table_.region_of(GuestAddr(kTopPage - 1)), nullptr);
}

TEST_F(MemoryTableTest, RangeCrossing2To64IsRejectedUnderTheTopRegion) {
    add_ok(kTopPage, 0x1000);
    const struct {
        uint64_t gpa;
        uint64_t len;
    } crossing[] = {
        {kU64Max, 2},         // last byte and one past
        {kTopPage, 0x1001},   // whole region plus one
        {kU64Max - 15, 17},   // ends one past 2^64
        {kTopPage, kU64Max},  // wraps far
        {kU64Max, kU64Max},   // wraps to just below itself
    };
    for (const auto& c : crossing) {
        auto r = translate(c.gpa, c.len);
        ASSERT_FALSE(r.has_value()) << std::hex << c.gpa << "+" << c.len;
        EXPECT_EQ(r.error(), MemError::AddrOverflow) << std::hex << c.gpa << "+" << c.len;
        auto rc = table_.translate_contiguous(GuestAddr(c.gpa), c.len, Access::Read);
        ASSERT_FALSE(rc.has_value());
        EXPECT_EQ(rc.error(), MemError::AddrOverflow);
    }
}

TEST_F(MemoryTableTest, RangeEndingAt2To64AcrossTwoTopRegionsIsTwoPieces) {
    auto low = add_ok(kTopPage - 0x1000, 0x1000);
    auto top = add_ok(kTopPage, 0x1000);
    auto r = translate(kTopPage - 0x800, 0x1800);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(*r, 2u);
    EXPECT_EQ(base_of(out_[0]), low.data() + 0x800);
    EXPECT_EQ(out_[0].iov_len, 0x800u);
    EXPECT_EQ(base_of(out_[1]), top.data());
    EXPECT_EQ(out_[1].iov_len, 0x1000u);
    // With room for one piece only, the crossing is reported, not truncated.
    auto one = table_.translate(GuestAddr(kTopPage - 0x800), 0x1800, Access::Read,
                                std::span<iovec>(out_.data(), 1));
    ASSERT_FALSE(one.has_value());
    EXPECT_EQ(one.error(), MemError::TooManyPieces);
}

TEST_F(MemoryTableTest, AddRejectsOverlapWithTheTopRegion) {
    add_ok(kTopPage, 0x1000);
    const struct {
        const char* what;
        uint64_t gpa;
        std::size_t bytes;
    } shapes[] = {
        {"identical", kTopPage, 0x1000},
        {"top byte", kU64Max, 1},
        {"upper half", kTopPage + 0x800, 0x800},
        {"runs into it from below", kTopPage - 0x10, 0x20},
        {"covers it", kTopPage - 0x1000, 0x2000},
    };
    for (const auto& s : shapes) {
        auto st = table_.add(GuestAddr(s.gpa), backing_.get(s.bytes));
        ASSERT_FALSE(st.has_value()) << s.what;
        EXPECT_EQ(st.error(), MemError::RegionOverlap) << s.what;
    }
    add_ok(kTopPage - 0x1000, 0x1000);  // touching from below is fine
    EXPECT_EQ(table_.size(), 2u);
    // Added in the other order: the top region overlapping an existing one.
    MemoryTable t;
    ASSERT_TRUE(t.add(GuestAddr(kU64Max), backing_.get(1)).has_value());
    auto st = t.add(GuestAddr(kTopPage), backing_.get(0x1000));
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), MemError::RegionOverlap);
}

TEST_F(MemoryTableTest, AddRejectsMoreThanMaxRegions) {
    for (std::size_t i = 0; i < MemoryTable::kMaxRegions; ++i) {
        add_ok(0x1000 * (2 * i + 1), 0x100);
    }
    EXPECT_EQ(table_.size(), MemoryTable::kMaxRegions);
    auto st = table_.add(GuestAddr(0x10'0000'0000), backing_.get(0x100));
    ASSERT_FALSE(st.has_value());
    EXPECT_EQ(st.error(), MemError::TooManyRegions);
    EXPECT_EQ(table_.size(), MemoryTable::kMaxRegions);
    // The full table still translates its last region.
    const uint64_t last = 0x1000 * (2 * (MemoryTable::kMaxRegions - 1) + 1);
    EXPECT_TRUE(translate(last, 0x100).has_value());
}

TEST_F(MemoryTableTest, RegionsAddedOutOfOrderTranslateAndAreSorted) {
    auto c = add_ok(0x30000, 0x1000);
    auto a = add_ok(0x10000, 0x1000);
    auto d = add_ok(0x40000, 0x1000, Access::Read);
    auto b = add_ok(0x20000, 0x1000);
    auto adj = add_ok(0x11000, 0x800);  // adjacent to a, added last
    ASSERT_EQ(table_.size(), 5u);
    for (std::size_t i = 1; i < table_.size(); ++i) {
        EXPECT_LT(table_.region(i - 1).gpa.value, table_.region(i).gpa.value);
    }
    const std::pair<uint64_t, std::byte*> want[] = {{0x10010, a.data() + 0x10},
                                                    {0x20020, b.data() + 0x20},
                                                    {0x30030, c.data() + 0x30},
                                                    {0x40040, d.data() + 0x40},
                                                    {0x11050, adj.data() + 0x50}};
    for (const auto& [gpa, host] : want) {
        auto r = translate(gpa, 8);
        ASSERT_TRUE(r.has_value()) << std::hex << gpa;
        EXPECT_EQ(base_of(out_[0]), host) << std::hex << gpa;
    }
    auto span = translate(0x10f00, 0x200);
    ASSERT_TRUE(span.has_value());
    ASSERT_EQ(*span, 2u);
    EXPECT_EQ(base_of(out_[0]), a.data() + 0xf00);
    EXPECT_EQ(base_of(out_[1]), adj.data());
    EXPECT_EQ(table_.region(4).gpa.value, 0x40000u);
    EXPECT_EQ(table_.region(4).access, Access::Read);
}

}  // namespace
}  // namespace pvnet::mem::table_test
