// The in-process pairing (DESIGN.md, "Data flow"): guest memory in one
// memfd mapped twice — the guest's view and, separately, the backend's —
// and a kick and a call eventfd per vring. The two sides share bytes,
// never pointers, so what is measured in one process is what two
// processes pay. It produces the backend's device description
// (backend::DeviceSetup) the way vhost-user's messages do in a two-process
// setup. GuestPair adds pvnet's own driver (frontend::VirtioNet); tests
// that play the driver by hand use this class with their own rings.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pvnet/backend/device_setup.h"
#include "pvnet/mem/memory_region.h"
#include "pvnet/mem/memory_table.h"
#include "pvnet/notify/event_fd.h"
#include "pvnet/ring/split_ring.h"

namespace pvnet::pair {

/// Where guest memory starts in guest-physical space.
inline constexpr uint64_t kGuestBase = 0x100000;

class SharedMemoryPair {
public:
    /// `bytes` of guest memory at kGuestBase, doorbells for `nvrings`
    /// vrings. On failure returns what failed.
    std::optional<std::string> setup_memory(uint64_t bytes, uint16_t nvrings,
                                            const char* name) noexcept;

    const mem::MemoryTable& guest_table() const noexcept { return guest_table_; }
    const mem::MemoryTable& backend_table() const noexcept { return backend_table_; }
    /// The guest's host pointer for guest address `gpa` (inside the region).
    std::byte* guest_host(mem::GuestAddr gpa) const noexcept {
        return guest_->host() + (gpa.value - kGuestBase);
    }
    uint64_t guest_bytes() const noexcept { return guest_->size(); }
    /// The guest's memfd and mapping: what a vhost-user front-end shares.
    const mem::MemoryRegion& guest_region() const noexcept { return *guest_; }
    const notify::EventFd& kick(uint16_t vring) const noexcept { return kicks_[vring]; }
    const notify::EventFd& call(uint16_t vring) const noexcept { return calls_[vring]; }
    uint16_t num_vrings() const noexcept { return static_cast<uint16_t>(kicks_.size()); }

    /// The backend's description: `features`, the backend's table, and per
    /// vring its rings (base 0) and this pairing's doorbells.
    backend::DeviceSetup device_setup(uint64_t features,
                                      std::span<const ring::SplitRingAddrs> rings) const;

private:
    std::optional<mem::MemoryRegion> guest_;
    std::optional<mem::MemoryRegion> backend_view_;
    mem::MemoryTable guest_table_;
    mem::MemoryTable backend_table_;
    std::vector<notify::EventFd> kicks_, calls_;
};

}  // namespace pvnet::pair
