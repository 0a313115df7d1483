// What the relay tests read from `pvnet relay`'s counters lines: one
// counter's value, and the accounting identities of its final line.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "pvnet/lab/tool_output.h"

namespace pvnet::bench {

/// The value of `key=` in a relay's counters line (its last occurrence).
inline std::optional<uint64_t> counter(const std::string& out, const std::string& key) {
    return lab::key_value(out, key);
}

/// The relay's final counters line (lab::counters_line), "" if there is none.
inline std::string final_line(const std::string& out) {
    return lab::counters_line(out, "final").value_or("");
}

/// `key`'s value on `line`; a test failure, and 0, when it is missing.
inline uint64_t expect_counter(const std::string& line, const std::string& key) {
    const auto v = counter(line, key);
    EXPECT_TRUE(v.has_value()) << key << " missing: " << line;
    return v.value_or(0);
}

/// After a run: frames in = frames out + drops by reason, per direction,
/// from the relay's final line (DESIGN.md: a packet is never lost silently).
/// A two-process relay's backend half is `backend_out`, serve's final lines.
inline void expect_frames_accounted(const std::string& out, bool plain,
                                    const std::string& backend_out = {}) {
    const std::string line = final_line(out);
    ASSERT_FALSE(line.empty()) << "no final line: " << out;
    const auto get = [&](const std::string& k) { return expect_counter(line, k); };
    if (line.find(" backend=remote ") != std::string::npos) {
        const std::string be = lab::serve_queue_line(backend_out, "final").value_or("");
        ASSERT_FALSE(be.empty()) << "no final queue line from pvnet serve: " << backend_out;
        const auto bget = [&](const std::string& k) { return expect_counter(be, k); };
        EXPECT_EQ(get("a_read"), get("g2h_queued") + get("g2h_ring_full") + get("g2h_lost")) << line;
        EXPECT_EQ(get("g2h_in_flight"), 0u) << line;
        // Across the socket: every chain the guest queued was taken by serve's backend.
        EXPECT_EQ(get("g2h_queued"),
                  bget("tx_pkts") + bget("tx_drop_bad_chain") + bget("tx_drop_port"))
            << line << "\n" << be;
        // What serve delivered into guest buffers is what the guest reaped.
        EXPECT_EQ(get("h2g_frames") - get("h2g_bad_len"), bget("rx_pkts")) << line << "\n" << be;
        EXPECT_EQ(get("h2g_frames") - get("h2g_bad_len"),
                  get("a_written") + get("a_write_drops") + get("a_full") + get("h2g_lost") +
                      get("h2g_length_errors"))
            << line;
        EXPECT_EQ(get("broken"), 0u) << line;
        return;
    }
    if (plain) {
        for (const char* d : {"g2h", "h2g"}) {
            const std::string p = d;
            const auto g = [&](const char* k) { return get(p + k); };
            EXPECT_EQ(g("_reads"), g("_frames") + g("_write_eagain") + g("_write_errors") +
                                       g("_write_short") + g("_read_truncated"))
                << d << ": " << line;
        }
        return;
    }
    // Guest to host. Tap A's frames: queued on the tx ring, or refused.
    EXPECT_EQ(get("a_read"), get("g2h_queued") + get("g2h_ring_full") + get("g2h_lost")) << line;
    // The ring drained at stop: every chain queued was consumed by the backend.
    EXPECT_EQ(get("g2h_in_flight"), 0u) << line;
    EXPECT_EQ(get("g2h_queued"), get("g2h_frames") + get("g2h_bad_chain") + get("g2h_port_drops"))
        << line;
    // What the backend handed tap B: written, or rejected by it (its errno).
    EXPECT_EQ(get("g2h_frames"), get("b_written")) << line;
    EXPECT_EQ(get("g2h_port_drops"), get("b_write_drops")) << line;
    EXPECT_EQ(get("g2h_retry"), get("b_write_retry")) << line;
    // Host to guest. Tap B's frames read (b_read + b_read_drops): each one
    // delivered (b_read) is in guest buffers.
    EXPECT_EQ(get("b_read"), get("h2g_delivered")) << line;
    EXPECT_EQ(get("h2g_in_flight"), 0u) << line;
    // The guest's rx_pkts (h2g_frames) counts short used entries too.
    EXPECT_EQ(get("h2g_frames") - get("h2g_bad_len"), get("h2g_delivered")) << line;
    EXPECT_EQ(get("h2g_delivered"), get("a_written") + get("a_write_drops") + get("a_full") +
                                        get("h2g_lost") + get("h2g_length_errors"))
        << line;
    EXPECT_EQ(get("broken"), 0u) << line;
}

}  // namespace pvnet::bench
