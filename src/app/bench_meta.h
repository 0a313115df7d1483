// What every `pvnet bench` JSON file records about where its numbers came
// from: the commit, the command line, the machine and the peers' versions.
#pragma once

#include <nlohmann/json.hpp>

namespace pvnet::app {

/// Remembers argv for bench_meta(); main() calls it first.
void set_command_line(int argc, char** argv);

/// {"commit", "command_line", "date", "machine": {cpu_model, vcpus, kernel},
///  "peers": {dpdk, qemu, iperf3, sockperf, ping: Debian package versions}}.
nlohmann::json bench_meta();

}  // namespace pvnet::app
