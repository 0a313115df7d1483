// The counter tables of stats_table.h. Every counter a struct has is
// listed here once; the two output formats only walk the tables.
#include "stats_table.h"

namespace pvnet::app {

// A field read with .get(), named as the member.
#define PVNET_COUNTER(S, m) CounterField<S>{#m, [](const S& s) { return s.m.get(); }}

CounterTable<backend::VhostNetStats> vhost_net_counters() {
    using S = backend::VhostNetStats;
    static const CounterField<S> t[] = {
        PVNET_COUNTER(S, tx_pkts),
        PVNET_COUNTER(S, tx_bytes),
        PVNET_COUNTER(S, rx_pkts),
        PVNET_COUNTER(S, rx_bytes),
        PVNET_COUNTER(S, tx_runs),
        PVNET_COUNTER(S, rx_runs),
        PVNET_COUNTER(S, tx_weight_requeue),
        PVNET_COUNTER(S, rx_weight_requeue),
        PVNET_COUNTER(S, tx_max_run_pkts),
        PVNET_COUNTER(S, rx_max_run_pkts),
        PVNET_COUNTER(S, tx_kicks),
        PVNET_COUNTER(S, rx_kicks),
        PVNET_COUNTER(S, tx_calls),
        PVNET_COUNTER(S, rx_calls),
        PVNET_COUNTER(S, tx_signals_coalesced),
        PVNET_COUNTER(S, rx_signals_coalesced),
        PVNET_COUNTER(S, tx_signals_suppressed_event_idx),
        PVNET_COUNTER(S, rx_signals_suppressed_event_idx),
        PVNET_COUNTER(S, tx_coalesce_timer_fires),
        PVNET_COUNTER(S, rx_coalesce_timer_fires),
        PVNET_COUNTER(S, rx_ring_empty),
        PVNET_COUNTER(S, rx_ring_short),
        PVNET_COUNTER(S, rx_short_recv),
        PVNET_COUNTER(S, rx_merged_pkts),
        PVNET_COUNTER(S, tx_drop_bad_chain),
        PVNET_COUNTER(S, tx_drop_port),
        PVNET_COUNTER(S, tx_retry),
        PVNET_COUNTER(S, tx_discarded),
        PVNET_COUNTER(S, rx_drop_bad_chain),
        PVNET_COUNTER(S, rx_drop_no_room),
        PVNET_COUNTER(S, rx_port_unwatched),
        PVNET_COUNTER(S, direct_runs),
        PVNET_COUNTER(S, direct_pkts),
        PVNET_COUNTER(S, direct_busy),
        PVNET_COUNTER(S, tx_inflight_dropped),
        PVNET_COUNTER(S, rx_inflight_dropped),
    };
    return t;
}

CounterTable<backend::DeviceStats> device_counters() {
    using S = backend::DeviceStats;
    static const CounterField<S> t[] = {
        PVNET_COUNTER(S, wakeups),          PVNET_COUNTER(S, rounds),
        PVNET_COUNTER(S, busy_poll_hits),   PVNET_COUNTER(S, busy_poll_misses),
        PVNET_COUNTER(S, coalesce_updates), PVNET_COUNTER(S, vrings_broken),
        PVNET_COUNTER(S, port_hangups),     PVNET_COUNTER(S, control_ops),
    };
    return t;
}

CounterTable<vhost_user::SessionStats> session_counters() {
    using S = vhost_user::SessionStats;
    static const CounterField<S> t[] = {
        PVNET_COUNTER(S, connections),   PVNET_COUNTER(S, disconnects),
        PVNET_COUNTER(S, busy_rejected), PVNET_COUNTER(S, messages),
        PVNET_COUNTER(S, replies),       PVNET_COUNTER(S, rejected),
        PVNET_COUNTER(S, bad_header),    PVNET_COUNTER(S, bad_payload),
        PVNET_COUNTER(S, bad_fds),       PVNET_COUNTER(S, bad_fd_type),
        PVNET_COUNTER(S, bad_state),     PVNET_COUNTER(S, unsupported),
        PVNET_COUNTER(S, stalled),
        PVNET_COUNTER(S, mem_tables),    PVNET_COUNTER(S, mem_table_same),
        PVNET_COUNTER(S, rings_started), PVNET_COUNTER(S, rings_stopped),
        PVNET_COUNTER(S, inflight_fds),  PVNET_COUNTER(S, inflight_bad_log),
    };
    return t;
}

// The reply queue's counters, shared by the reflecting ports.
#define PVNET_QUEUE_COUNTERS(S)                                                  \
    CounterField<S>{"queued", [](const S& s) { return s.queue().stats.queued.get(); }},     \
        CounterField<S>{"retry_full", [](const S& s) { return s.queue().stats.retry_full.get(); }}, \
        CounterField<S>{"rx_pkts", [](const S& s) { return s.queue().stats.rx_pkts.get(); }},   \
        CounterField<S>{"rx_bytes", [](const S& s) { return s.queue().stats.rx_bytes.get(); }}, \
        CounterField<S>{"rx_drop_no_room",                                       \
                        [](const S& s) { return s.queue().stats.rx_drop_no_room.get(); }}, \
        CounterField<S>{"drop_session_end",                                      \
                        [](const S& s) { return s.queue().stats.drop_session_end.get(); }}

template <>
CounterTable<port::MacswapPort> port_counters<port::MacswapPort>() {
    using S = port::MacswapPort;
    static const CounterField<S> t[] = {
        PVNET_COUNTER(S, tx_pkts),
        PVNET_COUNTER(S, tx_drop_short),
        PVNET_COUNTER(S, tx_drop_oversize),
        PVNET_QUEUE_COUNTERS(S),
    };
    return t;
}

template <>
CounterTable<port::GenLoopPort> port_counters<port::GenLoopPort>() {
    using S = port::GenLoopPort;
    // The PVP generator and sink (`serve --gen-loop`): sent = sink_pkts + sink_lost - sink_reordered.
    static const CounterField<S> t[] = {
        CounterField<S>{"gen_pkts", [](const S& s) { return s.gen().stats().gen_pkts; }},
        CounterField<S>{"sink_pkts", [](const S& s) { return s.sink().stats().sink_pkts; }},
        CounterField<S>{"sink_lost", [](const S& s) { return s.sink().stats().sink_lost; }},
        CounterField<S>{"sink_reordered", [](const S& s) { return s.sink().stats().sink_reordered; }},
        CounterField<S>{"sink_duplicates",
                        [](const S& s) { return s.sink().stats().sink_duplicates; }},
        CounterField<S>{"sink_drop_corrupt",
                        [](const S& s) { return s.sink().stats().sink_drop_corrupt; }},
        CounterField<S>{"sink_drop_bad_len",
                        [](const S& s) { return s.sink().stats().sink_drop_bad_len; }},
    };
    return t;
}

template <>
CounterTable<port::IcmpEchoPort> port_counters<port::IcmpEchoPort>() {
    using S = port::IcmpEchoPort;
    static const std::vector<CounterField<S>> t = [] {
        std::vector<CounterField<S>> v = {
            PVNET_COUNTER(S, tx_pkts),
            PVNET_COUNTER(S, arp_replies),
            PVNET_COUNTER(S, echo_replies),
            PVNET_QUEUE_COUNTERS(S),
        };
        for (std::size_t i = 0; i < static_cast<std::size_t>(port::IcmpDrop::Count); ++i) {
            const auto why = static_cast<port::IcmpDrop>(i);
            v.push_back({"drop_" + std::string(port::to_string(why)),
                         [why](const S& s) { return s.drops.get(why); }});
        }
        return v;
    }();
    return t;
}

template <>
CounterTable<port::TapPort> port_counters<port::TapPort>() {
    using S = port::TapPort;
    static const CounterField<S> t[] = {
        PVNET_COUNTER(S, rx_pkts),
        PVNET_COUNTER(S, rx_bytes),
        PVNET_COUNTER(S, tx_pkts),
        PVNET_COUNTER(S, tx_bytes),
        PVNET_COUNTER(S, rx_empty),
        PVNET_COUNTER(S, rx_drop_short),
        PVNET_COUNTER(S, rx_drop_truncated),
        PVNET_COUNTER(S, rx_drop_no_session),
        PVNET_COUNTER(S, tx_drop_bad_len),
        PVNET_COUNTER(S, tx_retry),
        CounterField<S>{"rx_drops", [](const S& s) { return s.rx_drops(); }},
        CounterField<S>{"tx_drops", [](const S& s) { return s.tx_drops(); }},
    };
    return t;
}

template <>
CounterTable<port::SwitchPort> port_counters<port::SwitchPort>() {
    using S = port::SwitchPort;
    static const std::vector<CounterField<S>> t = [] {
        std::vector<CounterField<S>> v = {
            PVNET_COUNTER(S, tx_pkts),    PVNET_COUNTER(S, tx_unicast),
            PVNET_COUNTER(S, tx_flooded), PVNET_COUNTER(S, forwarded),
            PVNET_COUNTER(S, learned),    PVNET_COUNTER(S, moved),
            PVNET_COUNTER(S, aged),       PVNET_COUNTER(S, learn_table_full),
            PVNET_COUNTER(S, learn_dev_limit), PVNET_COUNTER(S, forgotten),
            PVNET_QUEUE_COUNTERS(S),
        };
        for (std::size_t i = 0; i < static_cast<std::size_t>(port::SwitchDrop::Count); ++i) {
            const auto why = static_cast<port::SwitchDrop>(i);
            v.push_back({"drop_" + std::string(port::to_string(why)),
                         [why](const S& s) { return s.drops.get(why); }});
        }
        return v;
    }();
    return t;
}

#undef PVNET_QUEUE_COUNTERS
#undef PVNET_COUNTER

namespace {

void append_kv(std::string& line, const std::vector<CounterGroup>& groups) {
    for (const auto& g : groups) {
        for (const auto& [name, v] : g.values) {
            line += ' ';
            line += g.prefix;
            line += name;
            line += '=';
            line += std::to_string(v);
        }
    }
}

void append_json(nlohmann::json& obj, const std::vector<CounterGroup>& groups) {
    for (const auto& g : groups) {
        nlohmann::json& o = obj[g.group];
        o = nlohmann::json::object();
        for (const auto& [name, v] : g.values) o[std::string(name)] = v;
    }
}

}  // namespace

std::vector<std::string> kv_lines(std::string_view tag, const DeviceSample& d) {
    std::vector<std::string> lines;
    const std::string head =
        std::string(tag) + " dev=" + std::to_string(d.dev) + " sock=" + d.sock;
    std::string dev_line = head + " connected=" + (d.connected ? "1" : "0");
    append_kv(dev_line, d.groups);
    lines.push_back(std::move(dev_line));
    for (const auto& q : d.queues) {
        std::string l = head + " q=" + std::to_string(q.q);
        append_kv(l, q.groups);
        lines.push_back(std::move(l));
    }
    return lines;
}

nlohmann::json to_json(std::span<const DeviceSample> devices) {
    nlohmann::json doc;
    nlohmann::json& arr = doc["devices"];
    arr = nlohmann::json::array();
    for (const auto& d : devices) {
        nlohmann::json o{{"dev", d.dev}, {"sock", d.sock}, {"connected", d.connected}};
        append_json(o, d.groups);
        nlohmann::json& qs = o["queues"];
        qs = nlohmann::json::array();
        for (const auto& q : d.queues) {
            nlohmann::json qo{{"q", q.q}};
            append_json(qo, q.groups);
            qs.push_back(std::move(qo));
        }
        arr.push_back(std::move(o));
    }
    return doc;
}

}  // namespace pvnet::app
