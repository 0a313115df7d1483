// The counters `pvnet serve` reports, as one table per stats struct: a
// counter's name and how to read it. Both outputs are generated from the
// same samples — the key=value "stats"/"final" lines and the --json-stats
// document — so a counter added to a table appears in both, under one name.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pvnet/backend/net_device.h"
#include "pvnet/port/icmp_echo_port.h"
#include "pvnet/port/gen_loop_port.h"
#include "pvnet/port/macswap_port.h"
#include "pvnet/port/switch_port.h"
#include "pvnet/port/tap_port.h"
#include "pvnet/vhost_user/server.h"

namespace pvnet::app {

template <typename S>
struct CounterField {
    std::string name;
    std::function<uint64_t(const S&)> get;
};
template <typename S>
using CounterTable = std::span<const CounterField<S>>;

CounterTable<backend::VhostNetStats> vhost_net_counters();
CounterTable<backend::DeviceStats> device_counters();
CounterTable<vhost_user::SessionStats> session_counters();
/// A port's own counters (one table per port type serve runs).
template <typename P>
CounterTable<P> port_counters();
template <>
CounterTable<port::MacswapPort> port_counters<port::MacswapPort>();
template <>
CounterTable<port::IcmpEchoPort> port_counters<port::IcmpEchoPort>();
template <>
CounterTable<port::TapPort> port_counters<port::TapPort>();
template <>
CounterTable<port::SwitchPort> port_counters<port::SwitchPort>();
template <>
CounterTable<port::GenLoopPort> port_counters<port::GenLoopPort>();

/// One struct's counters read at one moment. `group` names the JSON object;
/// `prefix` goes before each name on a key=value line (keeps port_tx_pkts
/// apart from the device's tx_pkts).
struct CounterGroup {
    std::string group;
    std::string prefix;
    std::vector<std::pair<std::string_view, uint64_t>> values;
};

template <typename S>
CounterGroup read_counters(std::string group, std::string prefix, const S& s,
                           CounterTable<S> table) {
    CounterGroup g{std::move(group), std::move(prefix), {}};
    g.values.reserve(table.size());
    for (const auto& f : table) g.values.emplace_back(f.name, f.get(s));
    return g;
}

struct QueueSample {
    uint16_t q = 0;
    std::vector<CounterGroup> groups;  ///< "vhost", "port"
};

/// One device (one --vhost-user socket).
struct DeviceSample {
    unsigned dev = 0;
    std::string sock;
    bool connected = false;
    std::vector<CounterGroup> groups;  ///< "device", "session"
    std::vector<QueueSample> queues;
};

/// "<tag> dev=D sock=PATH connected=0|1 k=v..." then, per queue pair,
/// "<tag> dev=D sock=PATH q=Q k=v...".
std::vector<std::string> kv_lines(std::string_view tag, const DeviceSample& d);
/// {"devices":[{"dev","sock","connected","device":{..},"session":{..},
///  "queues":[{"q","vhost":{..},"port":{..}}]}]}
nlohmann::json to_json(std::span<const DeviceSample> devices);

}  // namespace pvnet::app
