// What the grant tests share: a frontend's table and data memfd with the
// backend's view of them, and the access modes by name.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>

#include "pvnet/mem/grant_access.h"
#include "pvnet/mem/grant_table.h"
#include "pvnet/mem/memory_region.h"

namespace pvnet::mem {

constexpr DomId kBack = 0;
constexpr DomId kGuest = 7;
constexpr uint32_t kRefs = 64;
constexpr uint32_t kFrames = 32;
constexpr uint16_t kRing = 8;

/// A frontend (its table and data memfd) and the backend's view of it.
struct Granted {
    Granted()
        : table_mem(MemoryRegion::create(kRefs * sizeof(GrantEntry), "grant_test_table").value()),
          data(MemoryRegion::create(kFrames * kGrantPageBytes, "grant_test_data").value()),
          front(table_mem.bytes().first(kRefs * sizeof(GrantEntry))),
          refs(table_mem.bytes().first(kRefs * sizeof(GrantEntry)), kBack, kFrames) {}
    std::byte* page(uint32_t frame) const { return data.host() + frame * kGrantPageBytes; }
    /// process_vm copies reach this process's own mapping of the memfd.
    GrantSource source() { return GrantSource{&refs, data.fd(), &peer}; }
    uint16_t flags(GrantRef r) const {
        return static_cast<uint16_t>(
            reinterpret_cast<GrantEntry*>(table_mem.host())[r].word.load());
    }
    MemoryRegion table_mem;
    MemoryRegion data;
    GrantTable front;
    GrantRefs refs;
    GrantPeer peer{getpid(), reinterpret_cast<uint64_t>(data.host()), data.size()};
};

enum class Mode { Map, CopyPread, CopyProcessVm, Persistent };

inline std::unique_ptr<GrantAccess> make(Mode m, const GrantSource& s) {
    switch (m) {
        case Mode::Map: return std::make_unique<GrantMapper>(s, kRing);
        case Mode::CopyPread: return std::make_unique<GrantCopier>(s, kRing, CopyVia::Pread);
        case Mode::CopyProcessVm:
            return std::make_unique<GrantCopier>(s, kRing, CopyVia::ProcessVm);
        case Mode::Persistent: return std::make_unique<PersistentGrantPool>(s, kRing);
    }
    return nullptr;
}

}  // namespace pvnet::mem
