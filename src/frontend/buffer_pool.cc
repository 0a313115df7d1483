#include "pvnet/frontend/buffer_pool.h"

namespace pvnet::frontend {

Result<BufferPool, FrontendError> BufferPool::create(const mem::MemoryTable& table,
                                                     mem::GuestAddr gpa, uint32_t n,
                                                     uint32_t buf_bytes, bool shared) noexcept {
    auto host = table.translate_contiguous(gpa, uint64_t{n} * buf_bytes, mem::Access::ReadWrite);
    if (!host) return unexpected(FrontendError::AreaUnmapped);
    BufferPool p;
    p.gpa_ = gpa;
    p.host_ = *host;
    p.buf_bytes_ = buf_bytes;
    p.n_ = n;
    p.ids_.resize(n);
    // Lowest id on top: the first buffers taken are the first slots.
    for (uint32_t i = 0; i < n; ++i) p.ids_[i] = n - 1 - i;
    p.top_ = n;
    if (shared) p.lock_ = std::make_unique<std::mutex>();
    return p;
}

}  // namespace pvnet::frontend
