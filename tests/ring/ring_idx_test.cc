// RingIdx: free-running 16-bit ring indices with wrapping arithmetic,
// distance() and slot() for every legal queue size.
#include "pvnet/ring/ring_idx.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace pvnet::ring {
namespace {

TEST(RingIdx, DefaultsToZero) { EXPECT_EQ(RingIdx().value(), 0); }

TEST(RingIdx, IncrementWrapsFrom65535ToZero) {
    RingIdx i(65535);
    ++i;
    EXPECT_EQ(i.value(), 0);
    EXPECT_EQ((RingIdx(65535) + 1).value(), 0);
    EXPECT_EQ((RingIdx(65535) + 2).value(), 1);
    RingIdx j(65000);
    j += 1000;
    EXPECT_EQ(j.value(), 464);
}

TEST(RingIdx, AddingAFullTurnIsIdentity) {
    for (uint32_t v : {0u, 1u, 255u, 32768u, 65535u}) {
        RingIdx i(static_cast<uint16_t>(v));
        EXPECT_EQ((i + 65535) + 1, i);
        EXPECT_EQ(i + 0, i);
    }
}

TEST(RingIdx, SubtractionWrapsBelowZero) {
    EXPECT_EQ((RingIdx(0) - 1).value(), 65535);
    EXPECT_EQ((RingIdx(3) - 5).value(), 65534);
    EXPECT_EQ((RingIdx(100) - 100).value(), 0);
}

TEST(RingIdx, PlusAndMinusAreInverseForEveryValue) {
    const uint16_t steps[] = {1, 2, 255, 256, 32767, 32768, 65535};
    for (uint32_t v = 0; v <= 0xffff; ++v) {
        const RingIdx i(static_cast<uint16_t>(v));
        for (uint16_t n : steps) {
            ASSERT_EQ((i + n) - n, i) << v << " " << n;
            ASSERT_EQ((i + n).value(), static_cast<uint16_t>((v + n) % 65536)) << v << " " << n;
        }
    }
}

TEST(RingIdx, PreIncrementReturnsTheIncrementedIndex) {
    RingIdx i(7);
    RingIdx& r = ++i;
    EXPECT_EQ(&r, &i);
    EXPECT_EQ(r.value(), 8);
}

TEST(RingIdx, DistanceCountsForwardModulo2To16) {
    EXPECT_EQ(distance(RingIdx(0), RingIdx(0)), 0);
    EXPECT_EQ(distance(RingIdx(10), RingIdx(15)), 5);
    EXPECT_EQ(distance(RingIdx(65535), RingIdx(2)), 3);
    EXPECT_EQ(distance(RingIdx(65530), RingIdx(4)), 10);
    // Behind by one is 65535 ahead: there is no sign.
    EXPECT_EQ(distance(RingIdx(15), RingIdx(14)), 65535);
    EXPECT_EQ(distance(RingIdx(0), RingIdx(32768)), 32768);
}

TEST(RingIdx, DistanceOfFromPlusNIsNAcrossWrap) {
    for (uint32_t from = 0; from <= 0xffff; from += 251) {
        for (uint32_t n = 0; n <= 0xffff; n += 97) {
            const RingIdx a(static_cast<uint16_t>(from));
            const RingIdx b = a + static_cast<uint16_t>(n);
            ASSERT_EQ(distance(a, b), n) << from << " " << n;
        }
    }
    // Explicitly around the wrap point.
    for (uint32_t from = 65500; from <= 65535; ++from) {
        for (uint16_t n = 0; n < 100; ++n) {
            const RingIdx a(static_cast<uint16_t>(from));
            ASSERT_EQ(distance(a, a + n), n);
        }
    }
}

TEST(RingIdx, EqualityComparesValue) {
    EXPECT_EQ(RingIdx(5), RingIdx(5));
    EXPECT_NE(RingIdx(5), RingIdx(6));
    EXPECT_EQ(RingIdx(65535) + 1, RingIdx(0));
}

TEST(RingIdx, SlotIsIndexModuloSizeForEveryPowerOfTwoSize) {
    for (uint32_t size = 1; size <= 32768; size *= 2) {
        SCOPED_TRACE(size);
        for (uint32_t v = 0; v <= 0xffff; ++v) {
            const uint16_t s = RingIdx(static_cast<uint16_t>(v)).slot(static_cast<uint16_t>(size));
            ASSERT_EQ(s, v % size) << v;
            ASSERT_LT(s, size);
        }
    }
}

TEST(RingIdx, SlotAdvancesByOneAcrossTheIndexWrap) {
    // 2^16 is a multiple of every legal size, so wrapping the index never
    // skips or repeats a slot.
    for (uint32_t size = 1; size <= 32768; size *= 2) {
        SCOPED_TRACE(size);
        const uint16_t sz = static_cast<uint16_t>(size);
        RingIdx i(static_cast<uint16_t>(65536 - 3 * size / 2 - 1));
        for (int step = 0; step < 3 * static_cast<int>(size) + 2; ++step) {
            const RingIdx next = i + 1;
            ASSERT_EQ(next.slot(sz), (i.slot(sz) + 1u) % size) << i.value();
            i = next;
        }
    }
}

TEST(RingIdx, SlotOfMaxQueueSizeUsesLow15Bits) {
    EXPECT_EQ(RingIdx(32768).slot(32768), 0);
    EXPECT_EQ(RingIdx(65535).slot(32768), 32767);
    EXPECT_EQ(RingIdx(12345).slot(32768), 12345);
    EXPECT_EQ(RingIdx(65535).slot(1), 0);
    EXPECT_EQ(RingIdx(65535).slot(256), 255);
    EXPECT_EQ(RingIdx(256).slot(256), 0);
}

TEST(RingIdx, IsUsableInConstantExpressions) {
    constexpr RingIdx a = RingIdx(65534) + 3;
    static_assert(a.value() == 1);
    static_assert(distance(RingIdx(65534), a) == 3);
    static_assert(a.slot(1024) == 1);
    EXPECT_EQ(a.value(), 1);
}

}  // namespace
}  // namespace pvnet::ring
