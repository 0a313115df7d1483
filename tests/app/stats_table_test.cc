// The serve command's counter tables: each covers every counter of its
// struct under a distinct name, reads the right field, and the key=value
// lines and the JSON document carry the same counters with the same values.
#include "stats_table.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

namespace pvnet::app {
namespace {

template <typename S>
void expect_covers_every_counter(CounterTable<S> t) {
    // These structs hold Counters only: one table entry per member.
    EXPECT_EQ(t.size(), sizeof(S) / sizeof(Counter));
    std::set<std::string> names;
    for (const auto& f : t) EXPECT_TRUE(names.insert(f.name).second) << f.name;
}

TEST(StatsTableTest, TablesCoverEveryCounterOnceByName) {
    expect_covers_every_counter(vhost_net_counters());
    expect_covers_every_counter(device_counters());
    expect_covers_every_counter(session_counters());
}

TEST(StatsTableTest, EachEntryReadsItsOwnCounter) {
    backend::VhostNetStats s;
    // Counter i holds i + 1: an entry reading the wrong member shows a wrong value.
    auto* c = reinterpret_cast<Counter*>(&s);
    for (std::size_t i = 0; i < sizeof s / sizeof(Counter); ++i) c[i].add(i + 1);
    const auto t = vhost_net_counters();
    std::set<uint64_t> seen;
    for (const auto& f : t) seen.insert(f.get(s));
    EXPECT_EQ(seen.size(), t.size());
    EXPECT_EQ(t[0].get(s), 1u);  // tx_pkts, the first member
    EXPECT_EQ(s.rx_inflight_dropped.get(), t.size());  // the last member
}

TEST(StatsTableTest, PortTablesNameTheirDrops) {
    auto p = port::IcmpEchoPort::create({10, 0, 0, 1}, {2, 0, 0, 0, 0, 1}, 1518);
    ASSERT_TRUE(p.has_value());
    (*p)->drops.add(port::IcmpDrop::IpBadChecksum, 3);
    const CounterGroup g = read_counters("port", "port_", **p, port_counters<port::IcmpEchoPort>());
    std::map<std::string, uint64_t> m(g.values.begin(), g.values.end());
    EXPECT_EQ(m.at("drop_ip_bad_checksum"), 3u);
    EXPECT_EQ(m.at("drop_short"), 0u);
    EXPECT_EQ(m.size(), g.values.size());  // names distinct
    EXPECT_EQ(m.at("drop_session_end"), 0u);
    EXPECT_EQ(m.size(), 3 + 6 + static_cast<std::size_t>(port::IcmpDrop::Count));
}

TEST(StatsTableTest, SwitchPortTableNamesItsCountersAndDrops) {
    auto sw = port::L2Switch::create({});
    ASSERT_TRUE(sw.has_value());
    auto p = port::SwitchPort::create(**sw, 0, 1518);
    ASSERT_TRUE(p.has_value());
    (*p)->drops.add(port::SwitchDrop::OwnDevice, 3);
    (*p)->learn_table_full.add(2);
    (*p)->learn_dev_limit.add(4);
    (*p)->drops.add(port::SwitchDrop::MacMove, 5);
    const CounterGroup g = read_counters("port", "port_", **p, port_counters<port::SwitchPort>());
    std::map<std::string, uint64_t> m(g.values.begin(), g.values.end());
    EXPECT_EQ(m.at("drop_own_device"), 3u);
    EXPECT_EQ(m.at("learn_table_full"), 2u);
    EXPECT_EQ(m.at("learn_dev_limit"), 4u);
    EXPECT_EQ(m.at("drop_mac_move"), 5u);
    EXPECT_EQ(m.at("drop_runt"), 0u);
    EXPECT_EQ(m.size(), g.values.size());  // names distinct
    EXPECT_EQ(m.size(), 10 + 6 + static_cast<std::size_t>(port::SwitchDrop::Count));
}

TEST(StatsTableTest, KvLinesAndJsonCarryTheSameCounters) {
    backend::VhostNetStats q0, q1;
    backend::DeviceStats ds;
    vhost_user::SessionStats ss;
    q0.tx_pkts.add(5);
    q1.rx_drop_no_room.add(7);
    ds.rounds.add(11);
    ss.connections.add(1);
    auto port = port::MacswapPort::create(1518);
    ASSERT_TRUE(port.has_value());
    (*port)->tx_drop_short.add(2);

    DeviceSample d;
    d.dev = 1;
    d.sock = "/tmp/v.sock";
    d.connected = true;
    d.groups.push_back(read_counters("device", "", ds, device_counters()));
    d.groups.push_back(read_counters("session", "", ss, session_counters()));
    for (uint16_t q = 0; q < 2; ++q) {
        QueueSample qs{q, {}};
        qs.groups.push_back(read_counters("vhost", "", q == 0 ? q0 : q1, vhost_net_counters()));
        qs.groups.push_back(
            read_counters("port", "port_", **port, port_counters<port::MacswapPort>()));
        d.queues.push_back(std::move(qs));
    }

    const auto lines = kv_lines("stats", d);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0].rfind("stats dev=1 sock=/tmp/v.sock connected=1 wakeups=0 rounds=11", 0), 0u)
        << lines[0];
    EXPECT_EQ(lines[1].rfind("stats dev=1 sock=/tmp/v.sock q=0 tx_pkts=5 ", 0), 0u) << lines[1];
    EXPECT_NE(lines[2].find(" rx_drop_no_room=7"), std::string::npos);
    EXPECT_NE(lines[2].find(" port_tx_drop_short=2"), std::string::npos);

    const DeviceSample one[] = {d};
    const nlohmann::json j = to_json(one);
    const auto& jd = j.at("devices").at(0);
    EXPECT_EQ(jd.at("sock"), "/tmp/v.sock");
    EXPECT_EQ(jd.at("device").at("rounds"), 11);
    EXPECT_EQ(jd.at("session").at("connections"), 1);
    EXPECT_EQ(jd.at("queues").at(0).at("vhost").at("tx_pkts"), 5);
    EXPECT_EQ(jd.at("queues").at(1).at("port").at("tx_drop_short"), 2);

    // Every key=value on a queue line is in the JSON, under its group, with its value.
    for (uint16_t q = 0; q < 2; ++q) {
        std::istringstream in(lines[1 + q]);
        std::string tok;
        std::size_t counters = 0;
        while (in >> tok) {
            const auto eq = tok.find('=');
            if (eq == std::string::npos) continue;
            const std::string k = tok.substr(0, eq);
            if (k == "dev" || k == "sock" || k == "q") continue;
            const uint64_t v = std::stoull(tok.substr(eq + 1));
            const auto& qj = jd.at("queues").at(q);
            if (k.rfind("port_", 0) == 0) {
                EXPECT_EQ(qj.at("port").at(k.substr(5)), v) << k;
            } else {
                EXPECT_EQ(qj.at("vhost").at(k), v) << k;
            }
            ++counters;
        }
        EXPECT_EQ(counters, jd.at("queues").at(q).at("vhost").size() +
                                jd.at("queues").at(q).at("port").size());
    }
}

}  // namespace
}  // namespace pvnet::app
