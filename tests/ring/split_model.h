// The reference model of split_model_test: a SplitDriverQueue and a
// SplitDeviceQueue on one split ring, driven by one thread through random
// interleavings of every operation of both sides, checked after each step
// against queues of outstanding chains, with the lost-wakeup checks
// (kick after the device's "sleep", signal after the driver's).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/ring/device_queue.h"
#include "pvnet/ring/driver_queue.h"
#include "pvnet/ring/split_ring.h"
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::ring::model_test {

using mem::GuestAddr;

inline constexpr uint64_t kGuestBase = 0x10000;
inline constexpr uint64_t kIndirectGpa = kGuestBase + 0x10000;  // 256 * 8 * 16 = 32 KiB
inline constexpr uint64_t kDataGpa = kGuestBase + 0x20000;
inline constexpr uint64_t kDataBytes = 0x10000;
inline constexpr std::size_t kRegionBytes = 0x30000;
inline constexpr uint16_t kIndirectMax = 8;
inline constexpr std::size_t kMaxChainBufs = 12;  // above kIndirectMax: some go direct
inline constexpr uint32_t kMaxBufLen = 2048;

struct ModelParam {
    uint16_t size;
    bool event_idx;
    bool indirect;
    uint64_t seed;
    uint32_t ops;         ///< random operations to run
    uint32_t min_reaped;  ///< keep going until this many chains came back
};

inline std::string param_name(const ::testing::TestParamInfo<ModelParam>& info) {
    const ModelParam& p = info.param;
    return "Size" + std::to_string(p.size) + (p.event_idx ? "EventIdx" : "Flags") +
           (p.indirect ? "Indirect" : "Direct") + (p.min_reaped > 65536 ? "Wrap" : "");
}

/// True if `event` lies in [old_idx, new_idx) on the 16-bit circle: the
/// interval definition of the spec's event-index rule, written independently
/// of need_event().
inline bool crosses(uint16_t event, uint16_t old_idx, uint16_t new_idx) {
    const auto span = static_cast<uint16_t>(new_idx - old_idx);
    const auto off = static_cast<uint16_t>(event - old_idx);
    return off < span;
}

struct Chain {
    uint64_t token = 0;
    std::vector<Buf> out;
    std::vector<Buf> in;
    uint32_t in_bytes = 0;
    uint16_t descs = 0;  ///< ring descriptors it takes
    uint16_t head = 0;   ///< known once the device popped it
};

struct Used {
    uint64_t token;
    uint32_t len;
};

class Model {
public:
    explicit Model(const ModelParam& p)
        : p_(p), rng_(p.seed), skip_useless_pct_(p.min_reaped > 0 ? 97 : 85) {
        auto r = mem::MemoryRegion::create(kRegionBytes, "split_model_test");
        if (!r) throw std::runtime_error("MemoryRegion::create failed");
        region_.emplace(std::move(r).value());
        if (!table_.add(GuestAddr(kGuestBase), region_->bytes())) {
            throw std::runtime_error("MemoryTable::add failed");
        }
        const SplitRingAddrs addrs = split_ring_addrs_at(GuestAddr(kGuestBase), p.size);
        DriverQueueConfig dc;
        dc.addrs = addrs;
        dc.event_idx = p.event_idx;
        dc.indirect = p.indirect;
        dc.indirect_max = p.indirect ? kIndirectMax : 0;
        dc.indirect_area = GuestAddr(kIndirectGpa);
        auto d = SplitDriverQueue::create(table_, dc);
        if (!d) throw std::runtime_error("SplitDriverQueue::create failed");
        drv_ = std::move(d).value();
        DeviceQueueConfig vc;
        vc.addrs = addrs;
        vc.features = (p.event_idx ? virtio::feature_mask(virtio::VIRTIO_RING_F_EVENT_IDX) : 0) |
                      (p.indirect ? virtio::feature_mask(virtio::VIRTIO_RING_F_INDIRECT_DESC) : 0);
        auto v = SplitDeviceQueue::create(table_, vc);
        if (!v) throw std::runtime_error("SplitDeviceQueue::create failed");
        dev_ = std::move(v).value();
        chain_ = std::make_unique<DescChain>();
        num_free_ = p.size;
    }

    void run() {
        for (uint32_t op = 0; op < p_.ops || reaped_ < p_.min_reaped; ++op) {
            op_ = op;
            step();
            if (::testing::Test::HasFailure()) return;
            // Runaway guard: a wrap run makes steady progress.
            ASSERT_LT(op, 40u * (p_.ops + p_.min_reaped)) << "no progress";
        }
        // Drain: everything made available comes back (DESIGN.md "every
        // descriptor made available is eventually used").
        drain();
    }

    uint64_t reaped() const { return reaped_; }
    uint64_t kick_checks() const { return kick_checks_; }
    uint64_t signal_checks() const { return signal_checks_; }

private:
    /// splitmix64: deterministic for a seed on every platform, and cheap in
    /// the unoptimised sanitizer build.
    uint32_t rand(uint32_t n) {
        uint64_t z = (rng_ += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        return static_cast<uint32_t>((z ^ (z >> 31)) % n);
    }

    std::string where() const {
        return "seed " + std::to_string(p_.seed) + " op " + std::to_string(op_);
    }

    enum class Op : uint8_t {
        Add,
        Publish,
        Kick,
        GetUsed,
        DisableCb,
        EnableCb,
        EnableCbDelayed,
        DrvIdle,
        Pop,
        Unpop,
        AddUsed,
        Flush,
        ShouldSignal,
        EnableNotify,
        DisableNotify,
        DevIdle,
        Count
    };
    static constexpr uint32_t kWeight[] = {16, 3, 8, 12, 2, 3, 2, 1, 12, 2, 12, 8, 3, 2, 2, 1};
    static_assert(std::size(kWeight) == static_cast<std::size_t>(Op::Count));
    static constexpr uint32_t kTotalWeight =
        std::accumulate(std::begin(kWeight), std::end(kWeight), 0u);
    /// A party asleep waits for its notification (or a timer after this many steps).
    static constexpr uint32_t kSleepSteps = 64;

    Op pick() {
        uint32_t r = rand(kTotalWeight);
        std::size_t i = 0;
        while (r >= kWeight[i]) r -= kWeight[i++];
        return static_cast<Op>(i);
    }

    /// A sleeping party does not touch its side of the ring.
    bool allowed(Op op) const {
        switch (op) {
            case Op::GetUsed:
            case Op::DisableCb:
            case Op::EnableCb:
            case Op::EnableCbDelayed:
            case Op::DrvIdle:
                return !drv_asleep_;
            case Op::Pop:
            case Op::Unpop:
            case Op::EnableNotify:
            case Op::DisableNotify:
            case Op::DevIdle:
                return !dev_asleep_;
            default:
                return true;
        }
    }

    /// Whether the op can make progress now (others still run, less often, to
    /// exercise NoSpace, Empty, and decisions with nothing new).
    bool useful(Op op) const {
        switch (op) {
            case Op::Add:
                return num_free_ > 0;
            case Op::Publish:
            case Op::Kick:
                return !unpublished_.empty();
            case Op::GetUsed:
                return !used_.empty();
            case Op::Pop:
                return !published_.empty();
            case Op::Unpop:
                return unpoppable_ > 0;
            case Op::AddUsed:
                return !popped_.empty();
            case Op::Flush:
                return !staged_.empty();
            default:
                return true;
        }
    }

    void step() {
        Op op = pick();
        for (int tries = 0;
             tries < 8 && (!allowed(op) || (!useful(op) && rand(100) < skip_useless_pct_));
             ++tries) {
            op = pick();
        }
        if (allowed(op)) run_op(op);
        // Timers: a party asleep too long wakes up by itself (spurious wakeup).
        if (dev_asleep_ && ++dev_asleep_steps_ > kSleepSteps) dev_asleep_ = false;
        if (drv_asleep_ && ++drv_asleep_steps_ > kSleepSteps) drv_asleep_ = false;
        check_invariants();
    }

    void run_op(Op op) {
        // Driver and device work in bursts of up to 4, as NAPI and vhost do.
        const uint32_t burst = 1 + rand(4);
        switch (op) {
            case Op::Add:
                for (uint32_t k = 0; k < burst && !::testing::Test::HasFailure(); ++k) drv_add();
                break;
            case Op::Publish:
                drv_publish();
                break;
            case Op::Kick:
                drv_kick_prepare();
                break;
            case Op::GetUsed:
                for (uint32_t k = 0; k < burst && !::testing::Test::HasFailure(); ++k) {
                    if (!drv_get_used()) break;
                }
                break;
            case Op::DisableCb:
                drv_disable_cb();
                break;
            case Op::EnableCb:
                drv_enable_cb();
                break;
            case Op::EnableCbDelayed:
                drv_enable_cb_delayed();
                break;
            case Op::DrvIdle:
                // NAPI completes: reap everything, then re-arm.
                while (!::testing::Test::HasFailure() && drv_get_used()) {
                }
                drv_enable_cb();
                break;
            case Op::Pop:
                for (uint32_t k = 0; k < burst && !::testing::Test::HasFailure(); ++k) {
                    if (!dev_pop()) break;
                }
                break;
            case Op::Unpop:
                dev_unpop();
                break;
            case Op::AddUsed:
                for (uint32_t k = 0; k < burst && !::testing::Test::HasFailure(); ++k) {
                    dev_add_used();
                }
                break;
            case Op::Flush:
                dev_flush_used();
                if (rand(4) != 0) dev_should_signal();  // usually one decision per burst
                break;
            case Op::ShouldSignal:
                dev_should_signal();
                break;
            case Op::EnableNotify:
                dev_enable_notify();
                break;
            case Op::DisableNotify:
                dev_disable_notify();
                break;
            case Op::DevIdle:
                // vhost's handle_tx runs dry: pop everything, then re-arm kicks.
                while (!::testing::Test::HasFailure() && dev_pop()) {
                }
                dev_enable_notify();
                break;
            case Op::Count:
                break;
        }
    }

    void check_invariants() {
        ASSERT_FALSE(drv_->broken()) << where() << ": " << to_string(drv_->broken_reason());
        ASSERT_FALSE(dev_->broken()) << where() << ": " << to_string(dev_->broken_reason());
        ASSERT_EQ(drv_->num_free(), num_free_) << where();
        const std::size_t outstanding = unpublished_.size() + published_.size() + popped_.size() +
                                        staged_.size() + used_.size();
        ASSERT_EQ(drv_->in_flight(), outstanding) << where();
    }

    // ------------------------------------------------------------ driver

    void drv_add() {
        const std::size_t max_bufs = std::min<std::size_t>(p_.size, kMaxChainBufs);
        const std::size_t n = 1 + rand(static_cast<uint32_t>(max_bufs));
        const std::size_t n_out = rand(static_cast<uint32_t>(n + 1));
        Chain c;
        c.token = next_token_;
        for (std::size_t k = 0; k < n; ++k) {
            const uint32_t len = 1 + rand(kMaxBufLen);
            const uint64_t off = rand(static_cast<uint32_t>(kDataBytes - len + 1));
            const Buf b{GuestAddr(kDataGpa + off), len};
            if (k < n_out) {
                c.out.push_back(b);
            } else {
                c.in.push_back(b);
                c.in_bytes += len;
            }
        }
        c.descs = p_.indirect && n > 1 && n <= kIndirectMax ? 1 : static_cast<uint16_t>(n);
        const AddStatus s = drv_->add(c.out, c.in, c.token);
        if (num_free_ < c.descs) {
            ASSERT_EQ(s, AddStatus::NoSpace) << where();
            return;
        }
        ASSERT_EQ(s, AddStatus::Ok) << where();
        num_free_ = static_cast<uint16_t>(num_free_ - c.descs);
        ++next_token_;
        unpublished_.push_back(std::move(c));
    }

    /// Moves the model's unpublished chains to published; true if any.
    bool model_publish() {
        const bool any = !unpublished_.empty();
        avail_idx_ = static_cast<uint16_t>(avail_idx_ + unpublished_.size());
        while (!unpublished_.empty()) {
            published_.push_back(std::move(unpublished_.front()));
            unpublished_.pop_front();
        }
        return any;
    }

    void drv_publish() {
        drv_->publish();
        if (model_publish() && dev_asleep_) published_while_dev_asleep_ = true;
    }

    void drv_kick_prepare() {
        const bool any_new = model_publish();
        const bool kick = drv_->kick_prepare();
        const uint16_t old_idx = kicked_idx_;
        kicked_idx_ = avail_idx_;
        if (old_idx == avail_idx_) {
            // Rule: nothing published since the last decision, no kick.
            ASSERT_FALSE(kick) << where();
            return;
        }
        // The exact decision, from the device's side of the ring.
        const bool want =
            p_.event_idx ? crosses(avail_event_, old_idx, avail_idx_) : !dev_notify_disabled_;
        ASSERT_EQ(kick, want) << where() << " old " << old_idx << " new " << avail_idx_
                              << " avail_event " << avail_event_;
        if (dev_asleep_ && (any_new || published_while_dev_asleep_)) {
            // Lost-wakeup property: the device went to sleep on enable_notify()
            // == false; a chain published since must be kicked for.
            ASSERT_TRUE(kick) << where() << ": lost kick";
            ++kick_checks_;
        }
        if (kick) {
            dev_asleep_ = false;
            published_while_dev_asleep_ = false;
        }
    }

    /// One get_used; false when nothing was reaped.
    bool drv_get_used() {
        UsedBuf u{};
        const bool got = drv_->get_used(u);
        drv_asleep_ = false;
        if (used_.empty()) {
            EXPECT_FALSE(got) << where();
            return false;
        }
        EXPECT_TRUE(got) << where();
        if (!got) return false;
        const Used want = used_.front();
        used_.pop_front();
        EXPECT_EQ(u.token, want.token) << where();
        EXPECT_EQ(u.len, want.len) << where();
        num_free_ = static_cast<uint16_t>(num_free_ + descs_of_.at(u.token));
        descs_of_.erase(u.token);
        ++reaped_;
        // Armed under EVENT_IDX, reaping moves used_event to the new last_used_idx.
        if (!drv_cb_disabled_) used_event_ = last_used_idx();
        return true;
    }

    void drv_disable_cb() {
        drv_->disable_cb();
        drv_cb_disabled_ = true;
        drv_asleep_ = false;
    }

    void drv_enable_cb() {
        const bool ok = drv_->enable_cb();
        drv_cb_disabled_ = false;
        used_event_ = last_used_idx();
        // Rule: true exactly when no published used entry is waiting.
        ASSERT_EQ(ok, used_.empty()) << where();
        drv_asleep_ = ok;
        drv_asleep_steps_ = 0;
        used_published_while_drv_asleep_ = false;
    }

    void drv_enable_cb_delayed() {
        const auto bufs = static_cast<uint16_t>(drv_->in_flight() * 3u / 4u);
        const bool ok = drv_->enable_cb_delayed();
        drv_cb_disabled_ = false;
        used_event_ = static_cast<uint16_t>(last_used_idx() + bufs);
        drv_asleep_ = false;
        // Rule: false once more than 3/4 of what is in flight is already used.
        ASSERT_EQ(ok, used_.size() <= bufs) << where();
    }

    // ------------------------------------------------------------ device

    /// One pop, checked against the oldest published chain; false when none.
    bool dev_pop() {
        const PopStatus s = dev_->pop(*chain_);
        dev_asleep_ = false;
        if (published_.empty()) {
            EXPECT_EQ(s, PopStatus::Empty) << where();
            return false;
        }
        EXPECT_EQ(s, PopStatus::Ok) << where();
        if (s != PopStatus::Ok) return false;
        pop_checked();
        return !::testing::Test::HasFailure();
    }

    void pop_checked() {
        Chain c = std::move(published_.front());
        published_.pop_front();
        // The chain popped is the oldest published, buffer for buffer.
        ASSERT_LT(chain_->head, p_.size) << where();
        ASSERT_EQ(chain_->out_num, c.out.size()) << where();
        ASSERT_EQ(chain_->in_num, c.in.size()) << where();
        ASSERT_EQ(chain_->in_bytes, c.in_bytes) << where();
        for (std::size_t k = 0; k < c.out.size() + c.in.size(); ++k) {
            const Buf& b = k < c.out.size() ? c.out[k] : c.in[k - c.out.size()];
            const iovec& v = chain_->iov[k];
            ASSERT_EQ(v.iov_base, region_->host() + (b.gpa.value - kGuestBase))
                << where() << " buffer " << k;
            ASSERT_EQ(v.iov_len, b.len) << where() << " buffer " << k;
        }
        for (const Chain& o : popped_) ASSERT_NE(o.head, chain_->head) << where();
        c.head = chain_->head;
        descs_of_[c.token] = c.descs;
        popped_.push_back(std::move(c));
        ++unpoppable_;
    }

    void dev_unpop() {
        dev_asleep_ = false;
        if (unpoppable_ == 0) return;
        const auto n = static_cast<uint16_t>(1 + rand(unpoppable_));
        dev_->unpop(n);
        for (uint16_t k = 0; k < n; ++k) {
            published_.push_front(std::move(popped_.back()));
            popped_.pop_back();
        }
        unpoppable_ = static_cast<uint16_t>(unpoppable_ - n);
    }

    void dev_add_used() {
        if (popped_.empty()) return;
        const std::size_t i = rand(static_cast<uint32_t>(popped_.size()));
        const Chain& c = popped_[i];
        const uint32_t len = rand(c.in_bytes + 1);
        ASSERT_TRUE(dev_->add_used(c.head, len)) << where();
        staged_.push_back(Used{c.token, len});
        // Chains popped after position i may still be given back.
        unpoppable_ =
            static_cast<uint16_t>(std::min<std::size_t>(unpoppable_, popped_.size() - 1 - i));
        popped_.erase(popped_.begin() + static_cast<std::ptrdiff_t>(i));
    }

    void dev_flush_used() {
        dev_->flush_used();
        if (staged_.empty()) return;
        used_idx_ = static_cast<uint16_t>(used_idx_ + staged_.size());
        while (!staged_.empty()) {
            used_.push_back(staged_.front());
            staged_.pop_front();
        }
        if (drv_asleep_) used_published_while_drv_asleep_ = true;
    }

    void dev_should_signal() {
        const bool sig = dev_->should_signal();
        const uint16_t old_idx = signalled_idx_;
        const bool first = !signalled_valid_;
        signalled_idx_ = used_idx_;
        signalled_valid_ = true;
        if (p_.event_idx) {
            // The exact decision: the first one, or used.idx passed used_event.
            const bool want = first || crosses(used_event_, old_idx, used_idx_);
            ASSERT_EQ(sig, want) << where() << " old " << old_idx << " new " << used_idx_
                                 << " used_event " << used_event_;
        } else {
            ASSERT_EQ(sig, !drv_cb_disabled_) << where();
        }
        if (drv_asleep_ && used_published_while_drv_asleep_) {
            // Lost-wakeup property: the driver slept on enable_cb() == true;
            // a used entry published since must raise an interrupt.
            ASSERT_TRUE(sig) << where() << ": lost interrupt";
            ++signal_checks_;
        }
        if (sig) {
            drv_asleep_ = false;
            used_published_while_drv_asleep_ = false;
        }
    }

    void dev_enable_notify() {
        const bool more = dev_->enable_notify();
        dev_notify_disabled_ = false;
        avail_event_ = last_avail_idx();
        // Rule: true exactly when published chains wait to be popped.
        ASSERT_EQ(more, !published_.empty()) << where();
        dev_asleep_ = !more;
        dev_asleep_steps_ = 0;
        published_while_dev_asleep_ = false;
    }

    void dev_disable_notify() {
        dev_->disable_notify();
        dev_notify_disabled_ = true;
        dev_asleep_ = false;
    }

    uint16_t last_used_idx() const { return static_cast<uint16_t>(reaped_); }

    uint16_t last_avail_idx() const {
        return static_cast<uint16_t>(avail_idx_ - published_.size());
    }

    // ------------------------------------------------------------ drain

    void drain() {
        drv_publish();
        while (dev_pop()) {
        }
        if (::testing::Test::HasFailure()) return;
        while (!popped_.empty()) {
            dev_add_used();
            if (::testing::Test::HasFailure()) return;
        }
        dev_flush_used();
        while (drv_get_used()) {
        }
        if (::testing::Test::HasFailure()) return;
        check_invariants();
        ASSERT_EQ(drv_->stats().errors.total(), 0u);
        ASSERT_EQ(dev_->stats().errors.total(), 0u);
        ASSERT_EQ(drv_->num_free(), p_.size);
        ASSERT_EQ(drv_->in_flight(), 0);
        ASSERT_EQ(dev_->last_avail_idx(), RingIdx(avail_idx_));
        ASSERT_EQ(dev_->used_idx(), RingIdx(used_idx_));
        ASSERT_EQ(drv_->last_used_idx(), RingIdx(used_idx_));
        ASSERT_EQ(drv_->stats().reaps.get(), reaped_);
        ASSERT_EQ(dev_->stats().pushes.get(), reaped_);
    }

    ModelParam p_;
    uint64_t rng_;
    /// How often an op that cannot make progress is re-picked; long wrap runs
    /// favour progress, short runs also probe NoSpace / Empty / nothing-new.
    uint32_t skip_useless_pct_;
    uint32_t op_ = 0;
    std::optional<mem::MemoryRegion> region_;
    mem::MemoryTable table_;
    std::unique_ptr<SplitDriverQueue> drv_;
    std::unique_ptr<SplitDeviceQueue> dev_;
    std::unique_ptr<DescChain> chain_;

    // Reference model: every chain is in exactly one of these, in order.
    std::deque<Chain> unpublished_;  ///< added
    std::deque<Chain> published_;    ///< avail.idx covers it, not popped
    std::deque<Chain> popped_;       ///< popped, not pushed (pop order)
    std::deque<Used> staged_;        ///< add_used, not flushed
    std::deque<Used> used_;          ///< used.idx covers it, not reaped
    std::unordered_map<uint64_t, uint16_t> descs_of_;
    uint16_t unpoppable_ = 0;  ///< trailing popped_ entries unpop() may give back

    uint64_t next_token_ = 0;
    uint64_t reaped_ = 0;
    uint16_t num_free_ = 0;
    uint16_t avail_idx_ = 0;    ///< published avail.idx
    uint16_t kicked_idx_ = 0;   ///< avail.idx at the driver's last kick decision
    uint16_t avail_event_ = 0;  ///< what the device's enable_notify wrote
    uint16_t used_idx_ = 0;     ///< published used.idx
    uint16_t used_event_ = 0;   ///< what the driver last wrote to used_event
    uint16_t signalled_idx_ = 0;
    bool signalled_valid_ = false;
    bool dev_notify_disabled_ = false;
    bool drv_cb_disabled_ = false;

    bool dev_asleep_ = false;
    uint32_t dev_asleep_steps_ = 0;
    uint32_t drv_asleep_steps_ = 0;
    bool published_while_dev_asleep_ = false;
    bool drv_asleep_ = false;
    bool used_published_while_drv_asleep_ = false;
    uint64_t kick_checks_ = 0;
    uint64_t signal_checks_ = 0;
};

}  // namespace pvnet::ring::model_test
