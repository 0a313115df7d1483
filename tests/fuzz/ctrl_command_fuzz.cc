// Fuzz target: parse_ctrl_command, the control virtqueue's command parser
// (VIRTIO 1.2 5.1.6.5 "Control Virtqueue", multiqueue steering, RSS and its
// hash calculation, 5.1.6.5.9 "Notifications Coalescing"; STYLE.md §11 "Fuzz").
//
// Input, read front to back (missing bytes read as zero):
//   byte 0   the features: bit 0 VIRTIO_NET_F_NOTF_COAL, bit 1 VIRTIO_NET_F_MQ,
//            bit 2 VIRTIO_NET_F_RSS; bits 3..7 max_virtqueue_pairs - 1
//            (31: 0x8000, the spec's maximum)
//   byte 1   bits 0..2: number of cuts (0..7) splitting the command into
//            iovecs; bit 3: VIRTIO_NET_F_HASH_REPORT
//   cuts     one byte each: a cut offset, taken modulo the command length + 1
//   rest     the command bytes (the chain's readable part)
// Each piece lives in its own heap block of exactly its size, so any read
// past a piece is an ASan report. The result must not depend on the split,
// and must match a model written from the spec's rules, which hands
// RSS_CONFIG's and HASH_CONFIG's data whole to net::parse_rss_config /
// parse_hash_config (the parser copies at most the longest valid config).
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/net/rss.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::fuzz {
namespace {

using backend::CtrlCommand;
using backend::CtrlError;
using backend::CtrlFeatures;

uint32_t le32_at(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

struct Want {
    Result<CtrlCommand, CtrlError> r;
    net::RssError rss_why = net::RssError::Count;
};

Want err(CtrlError e, net::RssError why = net::RssError::Count) { return {unexpected(e), why}; }

/// The spec's rules, in the order the parser applies them.
Want model(const uint8_t* b, std::size_t n, const CtrlFeatures& f) {
    namespace v = virtio;
    if (n < 2) return err(CtrlError::ShortHeader);
    CtrlCommand c;
    if (b[0] == v::VIRTIO_NET_CTRL_NOTF_COAL) {
        if (!f.notf_coal) return err(CtrlError::NotNegotiated);
        if (b[1] != v::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET &&
            b[1] != v::VIRTIO_NET_CTRL_NOTF_COAL_RX_SET) {
            return err(CtrlError::UnknownCmd);
        }
        if (n != 10) return err(CtrlError::BadDataSize);
        c.op = b[1] == v::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET ? CtrlCommand::Op::NotfCoalTxSet
                                                           : CtrlCommand::Op::NotfCoalRxSet;
        c.coal = notify::CoalesceParams{le32_at(b + 2), le32_at(b + 6)};
        return {c};
    }
    if (b[0] != v::VIRTIO_NET_CTRL_MQ) return err(CtrlError::UnknownClass);
    if (!f.mq && !f.rss && !f.hash_report) return err(CtrlError::NotNegotiated);
    if (b[1] == v::VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET) {
        if (!f.mq) return err(CtrlError::NotNegotiated);
        if (n != 4) return err(CtrlError::BadDataSize);
        const auto pairs = static_cast<uint16_t>(b[2] | b[3] << 8);
        if (pairs == 0 || pairs > 0x8000 || pairs > f.max_pairs) return err(CtrlError::OutOfRange);
        c.op = CtrlCommand::Op::MqVqPairsSet;
        c.pairs = pairs;
        return {c};
    }
    if (b[1] == v::VIRTIO_NET_CTRL_MQ_RSS_CONFIG) {
        if (!f.rss) return err(CtrlError::NotNegotiated);
        const auto cfg = net::parse_rss_config({b + 2, n - 2}, f.max_pairs);
        if (!cfg) return err(CtrlError::BadRss, cfg.error());
        c.op = CtrlCommand::Op::MqRssConfig;
        c.rss = cfg.value();
        return {c};
    }
    if (b[1] == v::VIRTIO_NET_CTRL_MQ_HASH_CONFIG) {
        if (!f.hash_report || f.rss) return err(CtrlError::NotNegotiated);
        const auto cfg = net::parse_hash_config({b + 2, n - 2});
        if (!cfg) return err(CtrlError::BadHashConfig, cfg.error());
        c.op = CtrlCommand::Op::MqHashConfig;
        c.hash = cfg.value();
        return {c};
    }
    return err(CtrlError::UnknownCmd);
}

bool same_rss(const net::RssConfig& a, const net::RssConfig& b) {
    return a.hash_types == b.hash_types && a.key_len == b.key_len && a.key == b.key &&
           a.table_len == b.table_len &&
           std::equal(a.table.begin(), a.table.begin() + a.table_len, b.table.begin()) &&
           a.unclassified_queue == b.unclassified_queue && a.max_tx_vq == b.max_tx_vq;
}

void check_same(const Result<CtrlCommand, CtrlError>& got, net::RssError got_why,
                const Want& want) {
    FUZZ_CHECK(got.has_value() == want.r.has_value());
    if (!want.r.has_value()) {
        FUZZ_CHECK(got.error() == want.r.error());
        FUZZ_CHECK(got_why == want.rss_why);
        return;
    }
    const CtrlCommand& g = got.value();
    const CtrlCommand& w = want.r.value();
    FUZZ_CHECK(g.op == w.op);
    switch (w.op) {
        case CtrlCommand::Op::NotfCoalTxSet:
        case CtrlCommand::Op::NotfCoalRxSet: FUZZ_CHECK(g.coal == w.coal); break;
        case CtrlCommand::Op::MqVqPairsSet:
            FUZZ_CHECK(g.pairs == w.pairs && g.pairs >= 1 && g.pairs <= 0x8000);
            break;
        case CtrlCommand::Op::MqRssConfig: FUZZ_CHECK(same_rss(g.rss, w.rss)); break;
        case CtrlCommand::Op::MqHashConfig:
            FUZZ_CHECK(g.hash.hash_types == w.hash.hash_types &&
                       g.hash.key_len == w.hash.key_len && g.hash.key == w.hash.key);
            break;
    }
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pvnet::fuzz;  // NOLINT(google-build-using-namespace): the target's helpers
    Reader in(data, size);
    const uint8_t fb = in.u8();
    CtrlFeatures f;
    f.notf_coal = (fb & 1u) != 0;
    f.mq = (fb & 2u) != 0;
    f.rss = (fb & 4u) != 0;
    const unsigned sel = fb >> 3;
    f.max_pairs = static_cast<uint16_t>(sel == 31 ? 0x8000 : sel + 1);
    const uint8_t cut_byte = in.u8();
    f.hash_report = (cut_byte & 8u) != 0;
    const std::size_t n_cuts = cut_byte % 8u;
    std::vector<uint8_t> cut_bytes;
    for (std::size_t i = 0; i < n_cuts; ++i) cut_bytes.push_back(in.u8());
    const std::size_t head = std::min<std::size_t>(size, 2 + n_cuts);
    const uint8_t* cmd = data + head;
    const std::size_t len = size - head;

    std::vector<std::size_t> cuts{0, len};
    for (const uint8_t c : cut_bytes) cuts.push_back(c % (len + 1));
    std::sort(cuts.begin(), cuts.end());

    // One exact-size heap block per piece (empty pieces included: a chain
    // never has them, the parser must not care).
    std::vector<std::unique_ptr<uint8_t[]>> blocks;
    std::vector<iovec> iov;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
        const std::size_t n = cuts[i + 1] - cuts[i];
        blocks.push_back(std::make_unique<uint8_t[]>(n));
        std::copy_n(cmd + cuts[i], n, blocks.back().get());
        iov.push_back(iovec{blocks.back().get(), n});
    }

    const Want want = model(cmd, len, f);
    pvnet::net::RssError why = pvnet::net::RssError::Count;
    const auto split = pvnet::backend::parse_ctrl_command(iov, f, &why);
    check_same(split, why, want);
    // Contiguous, as one iovec: the same answer.
    std::unique_ptr<uint8_t[]> whole = std::make_unique<uint8_t[]>(len);
    std::copy_n(cmd, len, whole.get());
    const iovec one{whole.get(), len};
    why = pvnet::net::RssError::Count;
    const auto contiguous = pvnet::backend::parse_ctrl_command({&one, 1}, f, &why);
    check_same(contiguous, why, want);
    return 0;
}
