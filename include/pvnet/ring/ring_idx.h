// RingIdx: a free-running 16-bit ring index (avail_idx, used_idx,
// last_avail_idx, ...). Wrapping arithmetic only; there is deliberately no
// `<`: the order of two free-running indices is only meaningful as a
// distance from a known earlier one.
#pragma once

#include <cstdint>

namespace pvnet::ring {

class RingIdx {
public:
    constexpr RingIdx() = default;
    constexpr explicit RingIdx(uint16_t v) : v_(v) {}

    constexpr uint16_t value() const noexcept { return v_; }
    /// The ring slot this index names; `size` is a power of two.
    constexpr uint16_t slot(uint16_t size) const noexcept {
        return static_cast<uint16_t>(v_ & (size - 1u));
    }

    constexpr RingIdx operator+(uint16_t n) const noexcept {
        return RingIdx(static_cast<uint16_t>(v_ + n));
    }
    constexpr RingIdx operator-(uint16_t n) const noexcept {
        return RingIdx(static_cast<uint16_t>(v_ - n));
    }
    constexpr RingIdx& operator+=(uint16_t n) noexcept {
        v_ = static_cast<uint16_t>(v_ + n);
        return *this;
    }
    constexpr RingIdx& operator++() noexcept { return *this += 1; }
    constexpr bool operator==(const RingIdx&) const = default;

private:
    uint16_t v_ = 0;
};

/// How far `to` is ahead of `from`, modulo 2^16.
constexpr uint16_t distance(RingIdx from, RingIdx to) noexcept {
    return static_cast<uint16_t>(to.value() - from.value());
}

static_assert(distance(RingIdx(65535), RingIdx(2)) == 3);
static_assert((RingIdx(65535) + 1).value() == 0);

}  // namespace pvnet::ring
