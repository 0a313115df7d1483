// Copies between a list of iovecs (a chain's pieces, guest memory) and one
// contiguous buffer, at a byte offset into the list. Pieces may be empty
// (an empty piece's base may be null and is never touched).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>

namespace pvnet {

/// Total bytes the pieces hold.
inline std::size_t iov_bytes(std::span<const iovec> iov) noexcept {
    std::size_t n = 0;
    for (const iovec& v : iov) n += v.iov_len;
    return n;
}

namespace detail {
/// Calls copy(piece byte pointer, bytes done so far, n) over `len` bytes that
/// start `offset` bytes into `iov`; false if `iov` ends first.
template <typename Copy>
bool walk_iov(std::span<const iovec> iov, std::size_t offset, std::size_t len,
              Copy&& copy) noexcept {
    std::size_t done = 0;
    for (const iovec& v : iov) {
        if (done == len) break;
        if (offset >= v.iov_len) {
            offset -= v.iov_len;
            continue;
        }
        const std::size_t n = std::min(v.iov_len - offset, len - done);
        copy(static_cast<std::byte*>(v.iov_base) + offset, done, n);
        done += n;
        offset = 0;
    }
    return done == len;
}
}  // namespace detail

/// Copies dst.size() bytes, starting `offset` bytes into `src`, into `dst`.
/// False (dst partly written) if `src` holds fewer than offset + dst.size().
inline bool copy_from_iov(std::span<const iovec> src, std::size_t offset,
                          std::span<std::byte> dst) noexcept {
    return detail::walk_iov(src, offset, dst.size(),
                            [&](const std::byte* p, std::size_t done, std::size_t n) {
                                std::memcpy(dst.data() + done, p, n);
                            });
}

/// Copies `src` into `dst` starting `offset` bytes into it. False (dst partly
/// written) if `dst` has room for fewer than offset + src.size() bytes.
inline bool copy_to_iov(std::span<const iovec> dst, std::size_t offset,
                        std::span<const std::byte> src) noexcept {
    return detail::walk_iov(dst, offset, src.size(),
                            [&](std::byte* p, std::size_t done, std::size_t n) {
                                std::memcpy(p, src.data() + done, n);
                            });
}

}  // namespace pvnet
