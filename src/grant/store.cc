// The directory-backed Store: one file per key, written by temp file + rename.
#include "pvnet/grant/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

namespace pvnet::grant {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

Unexpected<std::string> bad_key(std::string_view key, const char* why) {
    return unexpected("bad store key " + quote(key) + ": " + why);
}

bool key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '/';
}

// mkdir -p: every prefix of `path` ending before a '/' and `path` itself.
// An existing non-directory on the way is an error (mkdir's EEXIST is not enough).
Status<std::string> make_dirs(const std::string& path) {
    for (std::size_t pos = 1; pos <= path.size(); ++pos) {
        if (pos != path.size() && path[pos] != '/') continue;
        const std::string prefix = path.substr(0, pos);
        if (::mkdir(prefix.c_str(), 0700) == 0) continue;
        const int err = errno;
        struct stat st {};
        if (err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
        return unexpected("mkdir " + prefix + ": " + errno_text(err == EEXIST ? ENOTDIR : err));
    }
    return {};
}

// Closes the fd on every way out of read().
struct Fd {
    int fd;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

Status<std::string> check_key(std::string_view key) {
    if (key.empty()) return bad_key(key, "empty");
    if (key.size() > kMaxKeyBytes) return bad_key(key, "longer than 200 bytes");
    for (char c : key) {
        if (!key_char(c)) return bad_key(key, "character outside [A-Za-z0-9_-/]");
    }
    if (key.front() == '/' || key.back() == '/') return bad_key(key, "leading or trailing '/'");
    // '.' is not a key character, so "." and ".." cannot be components; only
    // empty ones ("a//b") are left to reject.
    if (key.find("//") != std::string_view::npos) return bad_key(key, "empty component");
    return {};
}

std::optional<uint32_t> parse_uint(std::string_view text) {
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    if (text.empty() || text.size() > 10) return std::nullopt;
    if (text.size() > 1 && text.front() == '0') return std::nullopt;
    uint64_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v > UINT32_MAX) return std::nullopt;
    return static_cast<uint32_t>(v);
}

std::string quote(std::string_view text) {
    constexpr std::size_t kMaxShown = 64;
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        if (b >= 0x20 && b < 0x7f && b != '\\' && b != '\'') {
            out += static_cast<char>(b);
        } else {
            out += "\\x";
            out += kHex[b >> 4];
            out += kHex[b & 0xf];
        }
    }
    out += text.size() > kMaxShown ? "'..." : "'";
    return out;
}

Result<Store, std::string> Store::open(std::string dir) {
    if (dir.empty()) return unexpected(std::string("store directory is empty"));
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (auto st = make_dirs(dir); !st) return unexpected("store " + st.error());
    return Store(std::move(dir));
}

std::string Store::path_of(std::string_view key) const {
    std::string path = dir_;
    path += '/';
    path += key;
    return path;
}

Status<std::string> Store::write(std::string_view key, std::string_view value) const {
    if (auto st = check_key(key); !st) return st;
    if (value.size() > kMaxValueBytes) {
        return unexpected("value for " + quote(key) + " longer than 1024 bytes");
    }
    if (value.find('\0') != std::string_view::npos) {
        return unexpected("value for " + quote(key) + " holds a NUL");
    }
    const std::string path = path_of(key);
    const std::size_t slash = path.rfind('/');
    if (auto st = make_dirs(path.substr(0, slash)); !st) return st;

    // The temp name starts with '.', which no key can hold, so it never
    // collides with a key; pid + counter keep concurrent writers apart.
    static std::atomic<uint64_t> counter{0};
    const std::string tmp = path.substr(0, slash + 1) + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return unexpected("write " + std::string(key) + ": " + errno_text(errno));
    std::size_t done = 0;
    while (done < value.size()) {
        const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            ::close(fd);
            ::unlink(tmp.c_str());
            return unexpected("write " + std::string(key) + ": " + errno_text(err));
        }
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return unexpected("write " + std::string(key) + ": rename: " + errno_text(err));
    }
    return {};
}

Result<std::optional<std::string>, std::string> Store::read(std::string_view key) const {
    if (auto st = check_key(key); !st) return unexpected(st.error());
    // The peer may have put a FIFO (O_NONBLOCK: open must not hang), a
    // symlink (O_NOFOLLOW) or a huge file where a value belongs.
    Fd f{::open(path_of(key).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
    if (f.fd < 0) {
        if (errno == ENOENT) return std::optional<std::string>{};
        return unexpected("read " + std::string(key) + ": " + errno_text(errno));
    }
    struct stat st {};
    if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return unexpected("read " + std::string(key) + ": not a regular file");
    }
    // One byte more than allowed tells an over-long value from a full one,
    // whatever st_size claims.
    std::string value(kMaxValueBytes + 1, '\0');
    std::size_t got = 0;
    while (got < value.size()) {
        const ssize_t n = ::read(f.fd, value.data() + got, value.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return unexpected("read " + std::string(key) + ": " + errno_text(errno));
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    if (got > kMaxValueBytes) {
        return unexpected("read " + std::string(key) + ": value longer than 1024 bytes");
    }
    value.resize(got);
    if (value.find('\0') != std::string::npos) {
        return unexpected("read " + std::string(key) + ": value holds a NUL");
    }
    return std::optional<std::string>(std::move(value));
}

Status<std::string> Store::remove(std::string_view key) const {
    if (auto st = check_key(key); !st) return st;
    if (::unlink(path_of(key).c_str()) != 0 && errno != ENOENT) {
        return unexpected("remove " + std::string(key) + ": " + errno_text(errno));
    }
    return {};
}

Result<uint32_t, std::string> Store::read_uint(std::string_view key) const {
    auto v = read(key);
    if (!v) return unexpected(v.error());
    if (!*v) return unexpected("key " + std::string(key) + " is absent, wanted a number");
    const std::optional<uint32_t> n = parse_uint(**v);
    if (!n) return unexpected("key " + std::string(key) + " is not a number: " + quote(**v));
    return *n;
}

Result<uint32_t, std::string> Store::read_uint(std::string_view key, uint32_t absent_value) const {
    auto v = read(key);
    if (!v) return unexpected(v.error());
    if (!*v) return absent_value;
    const std::optional<uint32_t> n = parse_uint(**v);
    if (!n) return unexpected("key " + std::string(key) + " is not a number: " + quote(**v));
    return *n;
}

Result<std::optional<std::string>, std::string> Store::wait_until(
    std::string_view key, std::string_view what, const Predicate& done,
    Clock::time_point deadline) const {
    constexpr auto kPoll = std::chrono::microseconds(500);
    for (;;) {
        auto v = read(key);
        if (!v) return unexpected(v.error());
        auto stop = done(*v);
        if (!stop) return unexpected(stop.error());
        if (*stop) return std::move(v).value();
        // Checked after a read, so even a deadline already past reads once.
        if (Clock::now() >= deadline) {
            return unexpected("timed out waiting for " + std::string(key) + " (" +
                              std::string(what) + ")");
        }
        std::this_thread::sleep_for(kPoll);
    }
}

}  // namespace pvnet::grant
