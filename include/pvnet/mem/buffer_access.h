// BufferAccess: how a device queue reaches the buffers a descriptor names,
// when they are not in a memory table mapped whole (DESIGN.md layer 2). The
// grant modes (grant_access.h) implement it; the ring calls it for every
// data descriptor it pops and for every chain it completes, so one ring and
// one set of handlers serve every mode.
#pragma once

#include <sys/uio.h>

#include <cstdint>

namespace pvnet::mem {

class BufferAccess {
public:
    virtual ~BufferAccess() = default;
    /// Host bytes for descriptor [addr, addr + len) of chain `head`, for the
    /// device to write (`writable`) or read. False: refused (the access
    /// counted why); the ring breaks the queue.
    virtual bool map(uint16_t head, uint64_t addr, uint32_t len, bool writable,
                     iovec& out) noexcept = 0;
    /// Chain `head` is finished: its first `written` writable bytes hold
    /// data (0 when it was given back unused). Nothing of it is used after.
    virtual void unmap(uint16_t head, uint32_t written) noexcept = 0;
    /// Every chain is finished, none written (the queue was reset or stopped).
    virtual void unmap_all() noexcept = 0;
};

}  // namespace pvnet::mem
