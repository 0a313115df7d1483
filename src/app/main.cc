// pvnet: the command line. Each subcommand is registered by an add_<name>_command()
// function that attaches its options and a callback; main() only parses and maps errors
// to exit codes. This is the one place in pvnet that may throw or exit (STYLE.md §5).
//
// Exit codes: 0 success; 1 for a failure while running a subcommand; 2 for no command;
// CLI11's nonzero code for any other bad command line.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "app_commands.h"
#include "bench_meta.h"

namespace pvnet::app {
namespace {

std::string version_string() {
    return std::string("pvnet ") + PVNET_VERSION + "\n" + "compiler: " + PVNET_COMPILER_ID + " " +
           PVNET_COMPILER_VERSION + "\n" + "build: " + PVNET_BUILD_TYPE;
}

void add_version_command(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("version", "Print the pvnet version and build details");
    cmd->callback([] { std::printf("%s\n", version_string().c_str()); });
}

}  // namespace

int run(int argc, char** argv) {
    set_command_line(argc, argv);
    CLI::App app{"pvnet: a userspace virtio-net datapath (frontend, vhost-style backend, ports)",
                 "pvnet"};
    app.set_version_flag("--version", version_string());
    app.require_subcommand(0, 1);  // an unknown word then reads "not expected: <word>"

    add_version_command(app);
    CLI::App* bench = app.add_subcommand("bench", "Run an experiment (see DESIGN.md, bench layer)");
    bench->require_subcommand(1);
    add_bench_pvp(*bench);
    add_bench_fairness(*bench);
    add_bench_stream_rr(*bench);
    add_bench_relay(*bench);
    add_bench_vhost_user(*bench);
    add_bench_xps(*bench);
    add_bench_grants(*bench);
    add_relay_command(app);
    add_serve_command(app);
    add_udp_rr_command(app);
    add_grant_commands(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);  // prints help, or the error and a hint, with CLI11's exit code
    }
    if (app.get_subcommands().empty()) {
        std::fprintf(stderr, "%s\npvnet: error: a command is required\n", app.help().c_str());
        return 2;
    }
    return 0;
}

}  // namespace pvnet::app

int main(int argc, char** argv) {
    // A subcommand reports failure by throwing; nothing escapes main.
    try {
        return pvnet::app::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pvnet: error: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "pvnet: error: unknown exception\n");
    }
    return 1;
}
