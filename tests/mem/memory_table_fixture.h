// Shared by the memory_table_*_test files: errors printed by name, and host
// backing whose buffers are distinct, so a wrong region shows up as a wrong
// host pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <span>
#include <vector>

#include "pvnet/mem/memory_table.h"

namespace pvnet::mem {

// gtest prints errors by name (found by argument-dependent lookup).
inline void PrintTo(MemError e, std::ostream* os) { *os << to_string(e); }

namespace table_test {

inline constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// Host backing for test regions; each buffer is distinct so a wrong region
// shows up as a wrong host pointer.
class Backing {
public:
    std::span<std::byte> get(std::size_t bytes) {
        bufs_.push_back(std::make_unique<std::byte[]>(bytes));
        return {bufs_.back().get(), bytes};
    }

private:
    std::vector<std::unique_ptr<std::byte[]>> bufs_;
};

}  // namespace table_test
}  // namespace pvnet::mem
