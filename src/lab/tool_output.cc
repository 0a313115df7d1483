// Tool-output parsers. Formats, as the tools print them:
//   iperf3 3.12 -J: {"start":…, "end":{"sum_sent":{"bytes":…,"retransmits":…},
//                   "sum_received":{"bytes":…,"bits_per_second":…}}, "error":"…"}
//   sockperf 3.7:   "avg-rtt=21.577 (std-dev=…)", "Total 25432 observations",
//                   "---> percentile 50.000 =   20.277" (ANSI colours around some)
//   iputils ping:   "--- 10.0.0.2 ping statistics ---"
//                   "22 packets transmitted, 10 received, [+1 duplicates, ][+2 errors, ]
//                    54.5455% packet loss, time 3902ms"
//                   "rtt min/avg/max/mdev = 0.055/0.072/0.093/0.011 ms"
#include "pvnet/lab/tool_output.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

namespace pvnet::lab {
namespace {

/// A finite number at the start of `s` (leading spaces skipped); advances `s` past it.
std::optional<double> take_double(std::string_view& s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || !std::isfinite(v)) return std::nullopt;
    s.remove_prefix(static_cast<std::size_t>(end - s.data()));
    return v;
}

template <typename U>
std::optional<U> take_uint(std::string_view& s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    U v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc()) return std::nullopt;
    s.remove_prefix(static_cast<std::size_t>(end - s.data()));
    return v;
}

/// The line of `text` starting at `at`, without its newline.
std::string_view line_at(std::string_view text, std::size_t at) {
    const std::size_t nl = text.find('\n', at);
    return text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
}

/// A non-negative finite number right after the first `key`.
std::optional<double> number_after(std::string_view text, std::string_view key) {
    const std::size_t at = text.find(key);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view rest = line_at(text, at + key.size());
    auto v = take_double(rest);
    if (!v || *v < 0) return std::nullopt;
    return v;
}

/// For error messages: the start of what the tool said (iperf3's JSON), or
/// its end, where ping and sockperf print their summaries.
std::string excerpt(std::string_view text, bool tail = false) {
    constexpr std::size_t kMax = 300;
    if (text.empty()) return "(no output)";
    if (text.size() <= kMax) return std::string(text);
    return tail ? "..." + std::string(text.substr(text.size() - kMax))
                : std::string(text.substr(0, kMax)) + "...";
}

using Json = nlohmann::json;

const Json* member(const Json& j, const char* key) {
    if (!j.is_object()) return nullptr;
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
}

}  // namespace

Result<Iperf3Report, std::string> parse_iperf3_json(std::string_view text) {
    const std::size_t brace = text.find('{');
    if (brace == std::string_view::npos) return unexpected("iperf3 gave no JSON: " + excerpt(text));
    const Json j = Json::parse(text.substr(brace), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        return unexpected("iperf3 gave malformed or truncated JSON: " + excerpt(text));
    }
    if (const Json* e = member(j, "error")) {
        return unexpected("iperf3: " + (e->is_string() ? e->get<std::string>() : e->dump()));
    }
    const Json* end = member(j, "end");
    const Json* sent = end ? member(*end, "sum_sent") : nullptr;
    const Json* recv = end ? member(*end, "sum_received") : nullptr;
    if (!sent || !recv) return unexpected(std::string("iperf3 JSON has no end.sum_sent/sum_received"));
    const Json* sb = member(*sent, "bytes");
    const Json* rb = member(*recv, "bytes");
    const Json* bps = member(*recv, "bits_per_second");
    if (!sb || !sb->is_number_unsigned() || !rb || !rb->is_number_unsigned()) {
        return unexpected(std::string("iperf3 JSON: sum_sent/sum_received bytes missing or not a count"));
    }
    if (!bps || !bps->is_number() || !std::isfinite(bps->get<double>()) || bps->get<double>() < 0) {
        return unexpected(std::string("iperf3 JSON: sum_received.bits_per_second missing or invalid"));
    }
    Iperf3Report r;
    r.sent_bytes = sb->get<uint64_t>();
    r.received_bytes = rb->get<uint64_t>();
    r.received_bps = bps->get<double>();
    if (const Json* rt = member(*sent, "retransmits")) {
        if (!rt->is_number_unsigned()) return unexpected(std::string("iperf3 JSON: bad retransmits"));
        r.retransmits = rt->get<uint64_t>();
    }
    return r;
}

Result<SockperfReport, std::string> parse_sockperf(std::string_view text) {
    if (text.find("No messages were received") != std::string_view::npos) {
        return unexpected("sockperf: no messages came back from the server: " + excerpt(text, true));
    }
    SockperfReport r;
    const auto p50 = number_after(text, "percentile 50.000 =");
    const auto p99 = number_after(text, "percentile 99.000 =");
    const auto p999 = number_after(text, "percentile 99.900 =");
    const auto avg = number_after(text, "avg-rtt=");
    if (!p50 || !p99 || !p999 || !avg) {
        return unexpected("sockperf output lacks avg-rtt or the 50/99/99.9 percentiles: " +
                          excerpt(text, true));
    }
    if (!(*p50 <= *p99 && *p99 <= *p999)) {
        return unexpected("sockperf percentiles out of order: " + excerpt(text, true));
    }
    // "Total N observations" (not "[Total Run]").
    std::optional<uint64_t> n;
    for (std::size_t at = text.find("Total "); at != std::string_view::npos && !n;
         at = text.find("Total ", at + 1)) {
        std::string_view rest = line_at(text, at + 6);
        auto v = take_uint<uint64_t>(rest);
        if (v && rest.substr(0, 13) == " observations") n = v;
    }
    if (!n || *n == 0) return unexpected("sockperf output has no observation count: " + excerpt(text, true));
    r.p50_us = *p50;
    r.p99_us = *p99;
    r.p999_us = *p999;
    r.avg_us = *avg;
    r.observations = *n;
    return r;
}

Result<PingReport, std::string> parse_ping(std::string_view text) {
    const std::size_t head = text.find(" ping statistics ---");
    const std::size_t nl = head == std::string_view::npos ? head : text.find('\n', head);
    if (nl == std::string_view::npos) {
        return unexpected("ping output has no statistics (interrupted?): " + excerpt(text, true));
    }
    PingReport r;
    // "N packets transmitted, M received, [+K what, ...]P% packet loss[, time Tms]"
    std::string_view counts = line_at(text, nl + 1);
    bool tx = false, rx = false, loss = false;
    while (!counts.empty()) {
        const std::size_t comma = counts.find(',');
        std::string_view field = counts.substr(0, comma);
        counts = comma == std::string_view::npos ? std::string_view() : counts.substr(comma + 1);
        while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
        if (field.empty() || field.front() == '+' || field.substr(0, 5) == "time " ||
            field.substr(0, 5) == "pipe ") {
            continue;  // duplicates, corrupted, errors, time: not needed
        }
        if (field.find("packet loss") != std::string_view::npos) {
            auto v = take_double(field);
            if (!v || field.substr(0, 1) != "%" || *v < 0 || *v > 100) {
                return unexpected("ping: bad packet loss figure: " + excerpt(text, true));
            }
            r.loss_pct = *v;
            loss = true;
            continue;
        }
        auto v = take_uint<uint32_t>(field);
        if (v && field == " packets transmitted") {
            r.transmitted = *v;
            tx = true;
        } else if (v && field == " received") {
            r.received = *v;
            rx = true;
        } else {
            return unexpected("ping: unexpected statistics field '" + std::string(field) +
                              "': " + excerpt(text, true));
        }
    }
    if (!tx || !rx || !loss) {
        return unexpected("ping statistics lack transmitted, received or loss: " + excerpt(text, true));
    }
    if (r.received > r.transmitted) {
        return unexpected("ping: more received than transmitted: " + excerpt(text, true));
    }
    // "rtt min/avg/max/mdev = a/b/c/d ms" on the next line, if anything came back.
    const std::size_t next = text.find('\n', nl + 1);
    std::string_view rtt = next == std::string_view::npos ? std::string_view() : line_at(text, next + 1);
    if (rtt.substr(0, 4) != "rtt ") {
        if (r.received == 0) return r;
        return unexpected("ping output has no rtt line (truncated?): " + excerpt(text, true));
    }
    const std::size_t eq = rtt.find(" = ");
    if (eq == std::string_view::npos) return unexpected("ping: bad rtt line: " + excerpt(text, true));
    std::string_view vals = rtt.substr(eq + 3);
    double* out[] = {&r.min_ms, &r.avg_ms, &r.max_ms, &r.mdev_ms};
    for (std::size_t i = 0; i < 4; ++i) {
        auto v = take_double(vals);
        if (!v || *v < 0) return unexpected("ping: bad rtt values: " + excerpt(text, true));
        *out[i] = *v;
        const std::string_view sep = i < 3 ? "/" : " ms";
        if (vals.substr(0, sep.size()) != sep) {
            return unexpected("ping: rtt line is not min/avg/max/mdev: " + excerpt(text, true));
        }
        vals.remove_prefix(sep.size());
    }
    if (!(r.min_ms <= r.avg_ms && r.avg_ms <= r.max_ms)) {
        return unexpected("ping: rtt min/avg/max out of order: " + excerpt(text, true));
    }
    r.has_rtt = true;
    return r;
}

std::optional<std::string> serve_queue_line(std::string_view text, std::string_view tag,
                                            uint16_t q) {
    const std::string head = std::string(tag) + " dev=0 ";
    const std::string qkey = " q=" + std::to_string(q) + " ";
    std::optional<std::string> found;
    std::size_t at = 0;
    while ((at = text.find(head, at)) != std::string_view::npos) {
        const std::size_t end = text.find('\n', at);
        const std::string_view line =
            text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
        if ((at == 0 || text[at - 1] == '\n') && line.find(qkey) != std::string_view::npos) {
            found = std::string(line);
        }
        at += head.size();
    }
    return found;
}

std::optional<std::string> counters_line(std::string_view text, std::string_view tag) {
    std::string head(tag);
    head.push_back(' ');
    std::size_t at = text.rfind(head);
    // Only at the start of a line.
    while (at != std::string_view::npos && at != 0 && text[at - 1] != '\n') {
        at = text.rfind(head, at - 1);
    }
    if (at == std::string_view::npos) return std::nullopt;
    const std::size_t from = at + tag.size();
    const std::size_t end = text.find('\n', from);
    return std::string(text.substr(from, end == std::string_view::npos ? end : end - from));
}

std::optional<uint64_t> key_value(std::string_view text, std::string_view key) {
    std::string needle = " ";
    needle.append(key).push_back('=');
    const std::size_t at = text.rfind(needle);
    if (at == std::string_view::npos) return std::nullopt;
    const char* first = text.data() + at + needle.size();
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(first, text.data() + text.size(), v);
    if (ec != std::errc() || end == first) return std::nullopt;
    return v;
}

}  // namespace pvnet::lab
