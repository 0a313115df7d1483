// 2 MiB hugepages for a DPDK run, given back afterwards: a reservation
// mounts hugetlbfs at /dev/hugepages if no 2 MiB mount exists and raises
// nr_hugepages if too few pages are free (both need root), and when it goes
// it restores exactly that: nr_hugepages to its old value, the mount (and
// the directory, if it made it) removed. What was there before is left.
// Two processes reserving at once would each restore their own view.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pvnet/util/result.h"

namespace pvnet::lab {

/// What a reservation may change, to compare before and after.
struct HugepageState {
    long nr_hugepages = 0;                    ///< of the 2 MiB pool (sysfs)
    long free_hugepages = 0;
    std::vector<std::string> hugetlbfs_dirs;  ///< every hugetlbfs mount point (/proc/mounts)
    bool operator==(const HugepageState&) const = default;
};
/// Fails if the 2 MiB pool does not exist (no hugetlb support).
Result<HugepageState, std::string> hugepage_state();

class HugepageReservation {
public:
    static constexpr const char* kMountDir = "/dev/hugepages";

    /// At least `pages` free 2 MiB pages and a hugetlbfs mount serving them.
    static Result<HugepageReservation, std::string> reserve(long pages);
    HugepageReservation(HugepageReservation&& o) noexcept;
    HugepageReservation& operator=(HugepageReservation&&) = delete;
    /// Restores nr_hugepages, unmounts what it mounted.
    ~HugepageReservation();

    /// The hugetlbfs mount to hand DPDK (--huge-dir).
    const std::string& dir() const noexcept { return dir_; }

private:
    HugepageReservation() = default;

    std::string dir_;
    bool mounted_ = false;               // dir_ is our mount
    bool made_dir_ = false;              // and we made the directory
    std::optional<long> old_nr_;         // nr_hugepages before we raised it
};

}  // namespace pvnet::lab
