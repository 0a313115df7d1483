#include "pvnet/mem/grant_peer.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "pvnet/mem/grant_table.h"

namespace pvnet::mem {

namespace {

std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%" PRIx64, v);
    return b;
}

}  // namespace

Status<std::string> check_peer_mapping(pid_t pid, uint64_t base, uint64_t bytes, int data_fd) {
    if (base % kGrantPageBytes != 0 || bytes == 0 || bytes > UINT64_MAX - base) {
        return unexpected("remote_base " + hex(base) + " is not page-aligned or wraps");
    }
    struct stat st{};
    if (::fstat(data_fd, &st) != 0) {
        return unexpected(std::string("fstat data memfd: ") + std::strerror(errno));
    }
    const std::string path = "/proc/" + std::to_string(pid) + "/maps";
    FILE* f = std::fopen(path.c_str(), "re");
    if (f == nullptr) return unexpected("open " + path + ": " + std::strerror(errno));
    char* line = nullptr;
    std::size_t cap = 0;
    uint64_t at = base;  // the first byte not yet found mapped as it must be
    const uint64_t end = base + bytes;
    std::string bad;
    // Lines come sorted by address; each one that covers `at` must map the
    // data memfd shared and writable, at the file offset `at - base`.
    while (at < end && bad.empty() && ::getline(&line, &cap, f) > 0) {
        uint64_t lo = 0, hi = 0, off = 0;
        char perms[5]{};
        unsigned maj = 0, min = 0;
        unsigned long long ino = 0;
        if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %llu", &lo, &hi, perms,
                        &off, &maj, &min, &ino) != 7) {
            bad = "unreadable line in " + path;
        } else if (hi <= at) {
            continue;
        } else if (lo > at) {
            break;  // nothing mapped at `at`
        } else if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's') {
            bad = "the mapping at " + hex(at) + " is " + perms + ", not shared read-write";
        } else if (maj != ::major(st.st_dev) || min != ::minor(st.st_dev) || ino != st.st_ino) {
            bad = "the mapping at " + hex(at) + " is not of the data memfd";
        } else if (off + (at - lo) != at - base) {
            bad = "the mapping at " + hex(at) + " is of data memfd offset " +
                  hex(off + (at - lo)) + ", not " + hex(at - base);
        } else {
            at = hi;
        }
    }
    std::free(line);
    std::fclose(f);
    if (bad.empty() && at < end) bad = "nothing of the data memfd is mapped at " + hex(at);
    if (!bad.empty()) return unexpected("remote_base " + hex(base) + ": " + bad);
    return {};
}

}  // namespace pvnet::mem
