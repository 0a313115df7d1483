// Subcommand registration for the pvnet CLI.
#pragma once

#include <CLI/CLI.hpp>

namespace pvnet::app {

/// `pvnet bench pvp`.
void add_bench_pvp(CLI::App& bench);
/// `pvnet bench fairness`.
void add_bench_fairness(CLI::App& bench);
/// `pvnet bench stream` and `pvnet bench rr`.
void add_bench_stream_rr(CLI::App& bench);
/// `pvnet bench relay`.
void add_bench_relay(CLI::App& bench);
/// `pvnet bench vhost-user`.
void add_bench_vhost_user(CLI::App& bench);
void add_bench_xps(CLI::App& bench);
/// `pvnet bench grants`.
void add_bench_grants(CLI::App& bench);
/// `pvnet relay`.
void add_relay_command(CLI::App& app);
/// `pvnet serve`.
void add_serve_command(CLI::App& app);
/// `pvnet grant-back` and `pvnet grant-front`.
void add_grant_commands(CLI::App& app);
/// `pvnet udp-rr server` and `pvnet udp-rr client`.
void add_udp_rr_command(CLI::App& app);

}  // namespace pvnet::app
