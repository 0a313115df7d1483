// grant::Store: the small key/value store that plays xenstore's role between a
// frontend and a backend process (the "file" flavour: one file per key under a
// directory both can reach). Keys are relative paths such as
// `backend/3/state`; values are short text, as in xenstore.
//
// The directory is shared with the peer, so everything read back is hostile:
// a value longer than kMaxValueBytes, one holding a NUL, or a key that is not
// a regular file is an error, never a crash or a hang. Writes are atomic for
// readers (temp file + rename), so a reader sees the old value or the new
// one, never half of one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "pvnet/util/result.h"

namespace pvnet::grant {

using Clock = std::chrono::steady_clock;

inline constexpr std::size_t kMaxKeyBytes = 200;
inline constexpr std::size_t kMaxValueBytes = 1024;

/// OK when `key` is a store key: 1..kMaxKeyBytes of [A-Za-z0-9_-] and '/',
/// no leading or trailing '/', no empty, "." or ".." component. The error
/// names the key and what is wrong with it.
Status<std::string> check_key(std::string_view key);

/// A strict decimal uint32: digits only, no sign or spaces, no leading zero
/// beyond "0" itself, at most 2^32 - 1; one trailing '\n' is tolerated (as
/// `echo` leaves it). nullopt for anything else.
std::optional<uint32_t> parse_uint(std::string_view text);

/// `text` quoted for an error message: non-printable bytes as \xNN, cut
/// after 64 bytes (peer values go into errors through this).
std::string quote(std::string_view text);

class Store {
public:
    /// What wait_until's predicate says of the value it saw (nullopt: absent):
    /// true to stop, false to keep waiting, an error to give up.
    using Predicate = std::function<Result<bool, std::string>(const std::optional<std::string>&)>;

    /// The store rooted at `dir`, created (mkdir -p) if missing.
    static Result<Store, std::string> open(std::string dir);

    const std::string& dir() const { return dir_; }

    /// Sets `key` (creating its parent directories): value ≤ kMaxValueBytes, no NUL.
    Status<std::string> write(std::string_view key, std::string_view value) const;
    /// The value of `key`, nullopt when absent.
    Result<std::optional<std::string>, std::string> read(std::string_view key) const;
    /// Removes `key`; removing an absent key is fine.
    Status<std::string> remove(std::string_view key) const;

    /// The value of `key` as a parse_uint number; absent or malformed is an
    /// error naming the key (and the text).
    Result<uint32_t, std::string> read_uint(std::string_view key) const;
    /// As above, but an absent key reads as `absent_value` (xenbus_read_unsigned).
    Result<uint32_t, std::string> read_uint(std::string_view key, uint32_t absent_value) const;

    /// Polls `key` (every ≤ 1 ms) until `done` says true, returning the value
    /// it saw; an error if `done` gives one, a read fails, or `deadline`
    /// passes (naming the key and `what` was awaited).
    Result<std::optional<std::string>, std::string> wait_until(std::string_view key,
                                                               std::string_view what,
                                                               const Predicate& done,
                                                               Clock::time_point deadline) const;

private:
    explicit Store(std::string dir) : dir_(std::move(dir)) {}
    std::string path_of(std::string_view key) const;

    std::string dir_;
};

}  // namespace pvnet::grant
