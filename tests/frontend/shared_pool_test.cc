// What XPS across queue pairs relies on (the relay's --xps): a pool other
// threads allocate from and free to (VirtioNetConfig::shared_pool), and the
// table that remembers each flow's rx queue (FlowRxQueueTable).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "pvnet/frontend/buffer_pool.h"
#include "pvnet/frontend/flow_table.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"

namespace pvnet::frontend {
namespace {

constexpr uint32_t kBufs = 64;
constexpr uint32_t kBufBytes = 2048;

struct PoolEnv {
    PoolEnv() {
        auto r = mem::MemoryRegion::create(kBufs * kBufBytes, "shared_pool_test");
        EXPECT_TRUE(r.has_value());
        region.emplace(std::move(r.value()));
        EXPECT_TRUE(table.add(mem::GuestAddr(0x100000), region->bytes()));
    }
    std::optional<mem::MemoryRegion> region;
    mem::MemoryTable table;
};

TEST(SharedBufferPool, ThreadsAllocatingAndFreeingNeverShareABuffer) {
    PoolEnv env;
    auto pool = BufferPool::create(env.table, mem::GuestAddr(0x100000), kBufs, kBufBytes, true);
    ASSERT_TRUE(pool.has_value());
    // Each id's owner: a thread writes its mark into the buffer it holds and
    // checks it before freeing; two holders of one buffer would see the
    // other's mark (and TSan a race).
    constexpr int kThreads = 3;
    constexpr int kRounds = 20000;
    std::atomic<uint64_t> clobbered{0}, empty{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
        ts.emplace_back([&, t] {
            std::vector<uint32_t> held;
            for (int i = 0; i < kRounds; ++i) {
                uint32_t id = 0;
                if (pool->alloc(id)) {
                    *pool->host(id) = static_cast<std::byte>(t);
                    held.push_back(id);
                } else {
                    empty.fetch_add(1);
                }
                if (held.size() > 8 || (i % 3 == 0 && !held.empty())) {
                    const uint32_t back = held.back();
                    held.pop_back();
                    if (*pool->host(back) != static_cast<std::byte>(t)) clobbered.fetch_add(1);
                    pool->free(back);
                }
            }
            for (const uint32_t id : held) pool->free(id);
        });
    }
    for (auto& th : ts) th.join();
    EXPECT_EQ(clobbered.load(), 0u);
    EXPECT_EQ(pool->free_count(), kBufs);
    // Every id is back exactly once.
    std::vector<uint32_t> ids;
    uint32_t id = 0;
    while (pool->alloc(id)) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    ASSERT_EQ(ids.size(), kBufs);
    for (uint32_t i = 0; i < kBufs; ++i) EXPECT_EQ(ids[i], i);
}

TEST(FlowRxQueueTable, RemembersTheLastQueueOfAFlow) {
    FlowRxQueueTable t;
    EXPECT_FALSE(t.lookup(0x1234).has_value());
    t.record(0x1234, 1);
    EXPECT_EQ(t.lookup(0x1234), std::optional<uint16_t>(1));
    t.record(0x1234, 0);
    EXPECT_EQ(t.lookup(0x1234), std::optional<uint16_t>(0));
    // Hash 0 is "no flow": never recorded, never found.
    t.record(0, 3);
    EXPECT_FALSE(t.lookup(0).has_value());
}

TEST(FlowRxQueueTable, FlowsSharingASetAllStayUntilItIsFull) {
    FlowRxQueueTable t;
    constexpr uint32_t kStride = FlowRxQueueTable::kSets;  // same set, other flows
    const uint32_t base = 0x00010005;
    for (uint32_t i = 0; i < FlowRxQueueTable::kWays; ++i) {
        t.record_at(base + i * kStride, static_cast<uint16_t>(i), 10);
    }
    for (uint32_t i = 0; i < FlowRxQueueTable::kWays; ++i) {
        EXPECT_EQ(t.lookup(base + i * kStride), std::optional<uint16_t>(i)) << "way " << i;
    }
    EXPECT_FALSE(t.lookup(base + FlowRxQueueTable::kWays * kStride).has_value());
}

TEST(FlowRxQueueTable, AFullSetEvictsTheFlowLeastRecentlySeen) {
    FlowRxQueueTable t;
    constexpr uint32_t kStride = FlowRxQueueTable::kSets;
    const uint32_t base = 0x00020007;
    for (uint32_t i = 0; i < FlowRxQueueTable::kWays; ++i) {
        t.record_at(base + i * kStride, 1, static_cast<uint16_t>(100 + i));
    }
    // Flow 0 is seen again (refreshed): flow 1 is now the oldest.
    t.record_at(base, 2, 200);
    const uint32_t newcomer = base + FlowRxQueueTable::kWays * kStride;
    t.record_at(newcomer, 3, 201);
    EXPECT_EQ(t.lookup(newcomer), std::optional<uint16_t>(3));
    EXPECT_EQ(t.lookup(base), std::optional<uint16_t>(2));
    EXPECT_FALSE(t.lookup(base + kStride).has_value())
        << "the evicted flow must not get another's queue";
    EXPECT_EQ(t.lookup(base + 2 * kStride), std::optional<uint16_t>(1));
    // Age is modulo 2^16 ticks: across the wrap, the oldest still goes.
    FlowRxQueueTable w;
    for (uint32_t i = 0; i < FlowRxQueueTable::kWays; ++i) {
        w.record_at(base + i * kStride, 1, static_cast<uint16_t>(0xfffe + i));  // fffe, ffff, 0, 1
    }
    w.record_at(newcomer, 0, 2);
    EXPECT_FALSE(w.lookup(base).has_value()) << "tick 0xfffe is the oldest at tick 2";
    EXPECT_TRUE(w.lookup(base + kStride).has_value());
}

TEST(FlowRxQueueTable, ReadersSeeWholeEntriesWhileWritersUpdate) {
    FlowRxQueueTable t;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> torn{0};
    // Flow h is only ever recorded on queue h % 4: any other answer is torn.
    std::thread writer([&] {
        for (uint32_t round = 0; round < 200; ++round) {
            for (uint32_t h = 1; h <= 8192; ++h) t.record(h, static_cast<uint16_t>(h % 4));
        }
        stop.store(true);
    });
    std::thread reader([&] {
        while (!stop.load()) {
            for (uint32_t h = 1; h <= 8192; ++h) {
                const auto q = t.lookup(h);
                if (q && *q != h % 4) torn.fetch_add(1);
            }
        }
    });
    writer.join();
    reader.join();
    EXPECT_EQ(torn.load(), 0u);
}

}  // namespace
}  // namespace pvnet::frontend
