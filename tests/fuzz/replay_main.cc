// Corpus replay for the g++ builds: a main() that feeds every file named on the command line,
// or found (recursively) under a directory named there, to LLVMFuzzerTestOneInput once, as
// libFuzzer does when given files. It lets the release and ASan builds run each fuzz target's
// committed corpus (tests/fuzz/corpus/<target>/) as a ctest test.
//
// Exit status: 0 when at least one input ran; 1 when none was found (an empty corpus is a
// missing seed set, not a pass); 2 on a bad path. A crashing input ends the process, as under
// libFuzzer; the last "replay: running" line names it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional in a fuzz target; weak so targets without it still link.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

// Reads a whole file into a buffer of exactly its size, so ASan sees any over-read.
bool read_file(const fs::path& path, std::unique_ptr<uint8_t[]>& data, size_t& size) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return false;
    }
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                                  std::istreambuf_iterator<char>()};
    if (in.bad()) {
        return false;
    }
    size = bytes.size();
    data = std::make_unique<uint8_t[]>(size);  // non-null even for an empty input
    if (size > 0) {
        std::memcpy(data.get(), bytes.data(), size);
    }
    return true;
}

// Collects the inputs named by one argument; dot-files in directories (.gitkeep) are skipped.
bool collect(const fs::path& arg, std::vector<fs::path>& inputs) {
    std::error_code ec;
    if (fs::is_regular_file(arg, ec)) {
        inputs.push_back(arg);
        return true;
    }
    if (!fs::is_directory(arg, ec)) {
        std::fprintf(stderr, "replay: %s: not a file or directory\n", arg.c_str());
        return false;
    }
    std::vector<fs::path> found;
    for (fs::recursive_directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (it->is_regular_file(ec) && !name.starts_with('.')) {
            found.push_back(it->path());
        }
    }
    if (ec) {
        std::fprintf(stderr, "replay: %s: %s\n", arg.c_str(), ec.message().c_str());
        return false;
    }
    std::sort(found.begin(), found.end());  // deterministic order
    inputs.insert(inputs.end(), found.begin(), found.end());
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (LLVMFuzzerInitialize != nullptr) {
        LLVMFuzzerInitialize(&argc, &argv);
    }

    std::vector<fs::path> inputs;
    int paths = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.starts_with('-')) {  // libFuzzer flags such as -runs=N mean nothing here
            std::fprintf(stderr, "replay: ignoring flag %s\n", argv[i]);
            continue;
        }
        ++paths;
        if (!collect(fs::path(arg), inputs)) {
            return 2;
        }
    }
    if (paths == 0) {
        std::fprintf(stderr, "usage: %s <corpus dir or input file>...\n", argv[0]);
        return 2;
    }

    size_t ran = 0;
    for (const fs::path& path : inputs) {
        std::unique_ptr<uint8_t[]> data;
        size_t size = 0;
        if (!read_file(path, data, size)) {
            std::fprintf(stderr, "replay: %s: cannot read\n", path.c_str());
            return 2;
        }
        std::printf("replay: running %s (%zu bytes)\n", path.c_str(), size);
        std::fflush(stdout);
        LLVMFuzzerTestOneInput(data.get(), size);
        ++ran;
    }

    std::printf("replay: %zu input(s) ran from %d path(s)\n", ran, paths);
    if (ran == 0) {
        std::fprintf(stderr, "replay: no inputs found: commit seeds to the corpus directory\n");
        return 1;
    }
    return 0;
}
