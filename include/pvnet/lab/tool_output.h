// Parsers of what the measuring tools print: iperf3's JSON (-J), sockperf
// ping-pong's summary, ping's (iputils) statistics. A tool's output is
// untrusted text: a truncated, garbled or unexpected shape is an error
// naming what is missing, never a crash or a made-up number. Every number
// is parsed whole (from_chars) and range-checked.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <string_view>

#include "pvnet/util/result.h"

namespace pvnet::lab {

/// iperf3 -J, the whole test (end.sum_sent / end.sum_received).
struct Iperf3Report {
    uint64_t sent_bytes = 0;      ///< sender's end.sum_sent.bytes
    uint64_t received_bytes = 0;  ///< receiver's end.sum_received.bytes
    uint64_t retransmits = 0;     ///< end.sum_sent.retransmits (0 if not reported)
    double received_bps = 0;      ///< end.sum_received.bits_per_second
};
/// Output may carry text before the JSON object (a warning on stderr). The
/// object's own "error" (iperf3 reports its failures in the JSON) is the error.
Result<Iperf3Report, std::string> parse_iperf3_json(std::string_view text);

/// sockperf ping-pong, the [Valid Duration] part (--full-rtt: round trips).
struct SockperfReport {
    double p50_us = 0, p99_us = 0, p999_us = 0;
    double avg_us = 0;
    uint64_t observations = 0;  ///< "Total N observations"
};
Result<SockperfReport, std::string> parse_sockperf(std::string_view text);

/// ping's closing statistics.
struct PingReport {
    uint32_t transmitted = 0, received = 0;
    double loss_pct = 0;  ///< ping's own "% packet loss"
    /// The rtt line: absent when nothing came back (received == 0).
    bool has_rtt = false;
    double min_ms = 0, avg_ms = 0, max_ms = 0, mdev_ms = 0;
};
Result<PingReport, std::string> parse_ping(std::string_view text);

/// The last line of `text` that starts with `tag` and a space (pvnet's
/// "final" or "stats" counter lines), from that space on: every key on it
/// then reads " key=", as key_value looks for. nullopt if there is none.
std::optional<std::string> counters_line(std::string_view text, std::string_view tag);
/// `pvnet serve`'s `tag` line for queue pair `q` of device 0 ("final dev=0 ... q=0 ..."),
/// the last one; nullopt if there is none.
std::optional<std::string> serve_queue_line(std::string_view text, std::string_view tag,
                                            uint16_t q = 0);

/// The value of ` key=` in pvnet's key=value counter lines (its last
/// occurrence in `text`); nullopt when absent or not a number.
std::optional<uint64_t> key_value(std::string_view text, std::string_view key);

}  // namespace pvnet::lab
