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

/// Writes into `out` the pieces of `src` without the `n` bytes that start
/// `at` bytes in: a piece they fall inside is split in two, one they cover
/// whole is left out, empty pieces are dropped. Returns the pieces written,
/// or 0 if `src` holds fewer than at + n bytes or `out` is too small
/// (src.size() + 1 pieces always suffice).
inline std::size_t iov_cut(std::span<const iovec> src, std::size_t at, std::size_t n,
                           std::span<iovec> out) noexcept {
    std::size_t k = 0;
    std::size_t off = 0;  // bytes of src before the current piece
    const std::size_t gap_end = at + n;
    for (const iovec& v : src) {
        auto* base = static_cast<std::byte*>(v.iov_base);
        const std::size_t end = off + v.iov_len;
        // The parts of [off, end) before `at` and from gap_end on.
        const std::size_t keep[2][2] = {{off, std::min(end, at)},
                                        {std::max(off, gap_end), end}};
        for (const auto& r : keep) {
            if (r[0] >= r[1]) continue;
            if (k == out.size()) return 0;
            out[k++] = iovec{base + (r[0] - off), r[1] - r[0]};
        }
        off = end;
    }
    return off >= gap_end ? k : 0;
}

}  // namespace pvnet
