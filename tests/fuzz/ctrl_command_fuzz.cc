// Fuzz target: parse_ctrl_command, the control virtqueue's command parser
// (VIRTIO 1.2 5.1.6.5 "Control Virtqueue", 5.1.6.5.9 "Notifications
// Coalescing"; STYLE.md §11 "Fuzz").
//
// Input, read front to back (missing bytes read as zero):
//   byte 0   bit 0: VIRTIO_NET_F_NOTF_COAL negotiated
//   byte 1   number of cuts (0..7) splitting the command into iovecs
//   cuts     one byte each: a cut offset, taken modulo the command length + 1
//   rest     the command bytes (the chain's readable part)
// Each piece lives in its own heap block of exactly its size, so any read
// past a piece is an ASan report. The result must not depend on the split,
// and must match a model written from the spec's rules.
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/backend/ctrl_queue.h"
#include "pvnet/virtio/virtio_net.h"

namespace pvnet::fuzz {
namespace {

using backend::CtrlCommand;
using backend::CtrlError;

uint32_t le32_at(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

/// The spec's rules, in the order the parser applies them.
Result<CtrlCommand, CtrlError> model(const uint8_t* b, std::size_t n, bool notf_coal) {
    if (n < 2) return unexpected(CtrlError::ShortHeader);
    if (b[0] != virtio::VIRTIO_NET_CTRL_NOTF_COAL) return unexpected(CtrlError::UnknownClass);
    if (!notf_coal) return unexpected(CtrlError::NotNegotiated);
    if (b[1] != virtio::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET &&
        b[1] != virtio::VIRTIO_NET_CTRL_NOTF_COAL_RX_SET) {
        return unexpected(CtrlError::UnknownCmd);
    }
    if (n != 10) return unexpected(CtrlError::BadDataSize);
    CtrlCommand c;
    c.op = b[1] == virtio::VIRTIO_NET_CTRL_NOTF_COAL_TX_SET ? CtrlCommand::Op::NotfCoalTxSet
                                                            : CtrlCommand::Op::NotfCoalRxSet;
    c.coal = notify::CoalesceParams{le32_at(b + 2), le32_at(b + 6)};
    return c;
}

void check_same(const Result<CtrlCommand, CtrlError>& got,
                const Result<CtrlCommand, CtrlError>& want) {
    check(got.has_value() == want.has_value());
    if (!want.has_value()) {
        check(got.error() == want.error());
        return;
    }
    check(got.value().op == want.value().op && got.value().coal == want.value().coal);
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pvnet::fuzz;  // NOLINT(google-build-using-namespace): the target's helpers
    Reader in(data, size);
    const bool notf_coal = (in.u8() & 1u) != 0;
    const std::size_t n_cuts = in.u8() % 8u;
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

    const auto want = model(cmd, len, notf_coal);
    check_same(pvnet::backend::parse_ctrl_command(iov, notf_coal), want);
    // Contiguous, as one iovec: the same answer.
    std::unique_ptr<uint8_t[]> whole = std::make_unique<uint8_t[]>(len);
    std::copy_n(cmd, len, whole.get());
    const iovec one{whole.get(), len};
    check_same(pvnet::backend::parse_ctrl_command({&one, 1}, notf_coal), want);
    return 0;
}
