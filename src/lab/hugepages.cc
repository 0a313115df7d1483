// Hugepage reservation: the 2 MiB pool's sysfs files and a hugetlbfs mount,
// each change recorded so the destructor undoes it (and only it).
#include "pvnet/lab/hugepages.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace pvnet::lab {
namespace {

constexpr const char* kPool = "/sys/kernel/mm/hugepages/hugepages-2048kB/";

std::optional<long> read_long(const std::string& path) {
    std::ifstream in(path);
    long v = 0;
    if (!(in >> v) || v < 0) return std::nullopt;
    return v;
}

bool write_long(const std::string& path, long v) {
    std::ofstream out(path);
    out << v;
    out.flush();
    return static_cast<bool>(out);
}

long default_hugepage_kb() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    long v = 0;
    while (in >> key >> v) {
        if (key == "Hugepagesize:") return v;
        in.ignore(1 << 12, '\n');
    }
    return 0;
}

/// A hugetlbfs mount serving 2 MiB pages, or "" if none.
std::string find_2m_mount() {
    const bool default_2m = default_hugepage_kb() == 2048;
    std::ifstream in("/proc/mounts");
    std::string dev, dir, type, opts, rest;
    while (in >> dev >> dir >> type >> opts && std::getline(in, rest)) {
        if (type != "hugetlbfs") continue;
        const bool sized = opts.find("pagesize=") != std::string::npos;
        if (opts.find("pagesize=2M") != std::string::npos || (!sized && default_2m)) return dir;
    }
    return {};
}

}  // namespace

Result<HugepageState, std::string> hugepage_state() {
    const std::string pool = kPool;
    const auto nr = read_long(pool + "nr_hugepages");
    const auto free_pages = read_long(pool + "free_hugepages");
    if (!nr || !free_pages) return unexpected("no 2 MiB hugepage pool (" + pool + ")");
    HugepageState s;
    s.nr_hugepages = *nr;
    s.free_hugepages = *free_pages;
    std::ifstream in("/proc/mounts");
    std::string dev, dir, type, rest;
    while (in >> dev >> dir >> type && std::getline(in, rest)) {
        if (type == "hugetlbfs") s.hugetlbfs_dirs.push_back(dir);
    }
    return s;
}

HugepageReservation::HugepageReservation(HugepageReservation&& o) noexcept
    : dir_(std::move(o.dir_)), mounted_(o.mounted_), made_dir_(o.made_dir_), old_nr_(o.old_nr_) {
    o.mounted_ = false;
    o.made_dir_ = false;
    o.old_nr_.reset();
}

HugepageReservation::~HugepageReservation() {
    // Lowering the pool frees its free pages now; pages still in use (a
    // file left in another mount) become surplus, freed when released.
    if (old_nr_) (void)write_long(std::string(kPool) + "nr_hugepages", *old_nr_);
    if (mounted_ && ::umount2(dir_.c_str(), 0) != 0) {
        // Busy (a straggler holds a file): detach it, it goes with the last user.
        (void)::umount2(dir_.c_str(), MNT_DETACH);
    }
    if (made_dir_) (void)::rmdir(dir_.c_str());
}

Result<HugepageReservation, std::string> HugepageReservation::reserve(long pages) {
    const bool root = ::geteuid() == 0;
    const std::string pool = kPool;
    // Every early return below drops `r`, which undoes what was done so far.
    HugepageReservation r;
    r.dir_ = find_2m_mount();
    if (r.dir_.empty()) {
        if (!root) return unexpected(std::string("no hugetlbfs mount for 2 MiB pages (root mounts one)"));
        r.dir_ = kMountDir;
        if (::mkdir(r.dir_.c_str(), 0755) == 0) {
            r.made_dir_ = true;
        } else if (errno != EEXIST) {
            return unexpected("mkdir " + r.dir_ + ": " + std::strerror(errno));
        }
        if (::mount("nodev", r.dir_.c_str(), "hugetlbfs", 0, "pagesize=2M") != 0) {
            return unexpected("mount hugetlbfs on " + r.dir_ + ": " + std::strerror(errno));
        }
        r.mounted_ = true;
    }
    const auto free_pages = read_long(pool + "free_hugepages");
    const auto total = read_long(pool + "nr_hugepages");
    if (!free_pages || !total) return unexpected("no 2 MiB hugepage pool (" + pool + ")");
    if (*free_pages >= pages) return r;
    if (!root) {
        return unexpected("only " + std::to_string(*free_pages) + " free 2 MiB hugepages, need " +
                          std::to_string(pages) + " (root reserves them)");
    }
    r.old_nr_ = *total;
    if (!write_long(pool + "nr_hugepages", *total + (pages - *free_pages))) {
        return unexpected("cannot write " + pool + "nr_hugepages: " + std::strerror(errno));
    }
    const long now_free = read_long(pool + "free_hugepages").value_or(0);
    if (now_free < pages) {
        return unexpected("could reserve only " + std::to_string(now_free) +
                          " free 2 MiB hugepages, need " + std::to_string(pages));
    }
    return r;
}

}  // namespace pvnet::lab
