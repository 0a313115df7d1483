// SIGINT/SIGTERM for the long-running commands (relay, serve).
#pragma once

namespace pvnet::app {

/// SIGINT and SIGTERM as a readable fd. Blocked before any thread starts, so
/// every thread inherits the mask and only the signalfd sees them.
int block_stop_signals();

}  // namespace pvnet::app
