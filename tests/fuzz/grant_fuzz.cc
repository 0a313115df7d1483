// Fuzz target: the backend's grant validation (GrantRefs::pin / unpin, and
// GrantMapper mapping what it validated) against a model of Xen's rules, and
// the grant connection's hello parser (issue 13, seed 004).
//
// Input: 16 grant entries as a hostile frontend wrote them (flags, domid,
// frame), then up to 64 operations: a backend request (reference near the
// table's end, offset, length, direction) mapped through GrantMapper, a
// release of a held request, or a frontend action (a proper revoke, a grant,
// or a raw overwrite of an entry the backend may hold). Every pin's outcome
// must equal the model's; every byte of a mapping is touched (a guard page
// catches an escape); released grants leave no pin behind. The rest of the
// input goes to parse_hello, whose accepted hellos must satisfy the layout
// rules the backend relies on.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstring>
#include <optional>
#include <vector>

#include "fuzz_support.h"
#include "pvnet/grant/wire.h"
#include "pvnet/mem/grant_access.h"
#include "pvnet/mem/grant_table.h"
#include "pvnet/mem/memory_region.h"

namespace pvnet::fuzz {
namespace {

using namespace pvnet::mem;

constexpr uint32_t kEntries = 16;
constexpr uint32_t kFrames = 8;
constexpr uint16_t kRing = 4;
constexpr DomId kSelf = 0;

struct Env {
    MemoryRegion table = MemoryRegion::create(kEntries * sizeof(GrantEntry), "fz_table").value();
    MemoryRegion data = MemoryRegion::create(kFrames * kGrantPageBytes, "fz_data").value();
};

Env& env() {
    static Env e;
    return e;
}

std::optional<GrantError> model(const GrantEntry* t, uint64_t addr, uint32_t len, bool write) {
    if (len == 0) return GrantError::ZeroLength;
    if ((addr >> kGrantPageShift) >= kEntries) return GrantError::RefOutOfRange;
    const uint32_t off = static_cast<uint32_t>(addr & (kGrantPageBytes - 1));
    if (len > kGrantPageBytes - off) return GrantError::CrossesPage;
    const uint32_t w = t[addr >> kGrantPageShift].word.load();
    const auto flags = static_cast<uint16_t>(w);
    if (!(flags & GTF_permit_access)) return GrantError::NotGranted;
    if ((w >> 16) != kSelf) return GrantError::WrongDomain;
    if (write && (flags & GTF_readonly)) return GrantError::ReadOnly;
    if (t[addr >> kGrantPageShift].frame >= kFrames) return GrantError::FrameOutOfRange;
    return std::nullopt;
}

void fuzz_grants(FuzzedDataProvider& in) {
    Env& e = env();
    std::memset(e.table.host(), 0, kEntries * sizeof(GrantEntry));
    auto* t = reinterpret_cast<GrantEntry*>(e.table.host());
    const std::span<std::byte> tb = e.table.bytes().first(kEntries * sizeof(GrantEntry));
    GrantTable front(tb);
    for (uint32_t r = 0; r < kEntries; ++r) {
        const uint32_t flags = in.ConsumeIntegral<uint16_t>() &
                               uint32_t{GTF_permit_access | GTF_readonly | 2u};
        const DomId dom = in.ConsumeBool() ? kSelf : in.ConsumeIntegral<DomId>();
        front.write_raw(r, flags | (uint32_t{dom} << 16),
                        in.ConsumeIntegralInRange<uint32_t>(0, kFrames + 1));
    }
    GrantRefs refs(tb, kSelf, kFrames);
    const GrantSource src{&refs, e.data.fd(), nullptr};
    std::optional<GrantMapper> mapper(std::in_place, src, kRing);
    std::vector<uint16_t> held;  // heads with a mapped request
    for (int op = 0; op < 64 && in.remaining_bytes() > 0; ++op) {
        switch (in.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: {
                const uint64_t ref = in.ConsumeIntegralInRange<uint64_t>(0, kEntries + 1);
                const uint32_t off = in.ConsumeIntegralInRange<uint32_t>(0, kGrantPageBytes - 1);
                const uint64_t addr = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                                       : grant_addr(static_cast<GrantRef>(ref), off);
                const uint32_t len = in.ConsumeIntegralInRange<uint32_t>(0, kGrantPageBytes + 1);
                const bool write = in.ConsumeBool();
                const uint16_t head = in.ConsumeIntegralInRange<uint16_t>(0, kRing - 1);
                const auto want = model(t, addr, len, write);
                const uint64_t errs = refs.errors().total();
                const uint64_t same = want ? refs.errors().get(*want) : 0;
                const uint64_t full = refs.errors().get(GrantError::TooManySegments);
                iovec v{};
                const bool ok = mapper->map(head, addr, len, write, v);
                if (want) {
                    // Refused, counted, and (TooManySegments aside) the model's reason.
                    FUZZ_CHECK(!ok);
                    FUZZ_CHECK(refs.errors().total() == errs + 1);
                    FUZZ_CHECK(refs.errors().get(*want) == same + 1 ||
                               refs.errors().get(GrantError::TooManySegments) == full + 1);
                } else if (ok) {
                    FUZZ_CHECK(v.iov_len == len);
                    auto* p = static_cast<volatile std::byte*>(v.iov_base);
                    for (uint32_t i = 0; i < len; ++i) {
                        if (write) p[i] = std::byte{1};
                        else (void)p[i];
                    }
                    held.push_back(head);
                } else {
                    FUZZ_CHECK(refs.errors().get(GrantError::TooManySegments) == full + 1);
                }
                break;
            }
            case 1:
                if (!held.empty()) {
                    const std::size_t i = in.ConsumeIntegralInRange<std::size_t>(0, held.size() - 1);
                    const uint16_t h = held[i];
                    mapper->unmap(h, in.ConsumeIntegral<uint32_t>());
                    std::erase(held, h);
                }
                break;
            case 2: {
                // A proper revoke fails while the backend holds the grant.
                const auto r = in.ConsumeIntegralInRange<GrantRef>(0, kEntries - 1);
                const uint32_t w = t[r].word.load();
                const bool busy = (w & (GTF_reading | GTF_writing)) != 0;
                const bool revoked = front.end_access(r).has_value();
                FUZZ_CHECK(revoked != busy);
                break;
            }
            default: {
                // Hostile: overwrite an entry whatever the backend holds.
                const auto r = in.ConsumeIntegralInRange<GrantRef>(0, kEntries - 1);
                front.write_raw(r, in.ConsumeIntegral<uint32_t>(),
                                in.ConsumeIntegralInRange<uint32_t>(0, kFrames + 1));
                break;
            }
        }
    }
    mapper.reset();  // every held request released
    FUZZ_CHECK(refs.pinned() == 0);
}

void fuzz_hello(FuzzedDataProvider& in) {
    const std::size_t nfds = in.ConsumeIntegralInRange<std::size_t>(0, 8);
    std::vector<std::byte> msg(sizeof(grant::GrantHello));
    const std::vector<uint8_t> raw = in.ConsumeRemainingBytes<uint8_t>();
    if (raw.size() == sizeof(grant::GrantHello)) {
        std::memcpy(msg.data(), raw.data(), raw.size());
    } else {
        // Mostly valid hellos with the tail of the input over them, so the
        // checks past the magic get exercised.
        grant::GrantHello h;
        h.domid = 1;
        h.ring_size = 256;
        h.frame_bytes = 1514;
        h.grant_entries = 4096;
        h.shared_bytes = 1u << 20;
        h.data_bytes = 1u << 20;
        h.rx_ring_off = 32768;
        h.tx_ring_off = 65536;
        std::memcpy(msg.data(), &h, sizeof h);
        const std::size_t at = raw.empty() ? 0 : raw[0] % sizeof h;
        for (std::size_t i = 1; i < raw.size() && at + i - 1 < sizeof h; ++i) {
            msg[at + i - 1] = std::byte{raw[i]};
        }
        if (!raw.empty() && raw[0] >= 0xf0) msg.resize(raw[0] & 0x0f);
    }
    auto h = grant::parse_hello(msg, nfds);
    if (!h) return;
    FUZZ_CHECK(nfds == grant::kHelloFds);
    FUZZ_CHECK(h->ring_size != 0 && (h->ring_size & (h->ring_size - 1)) == 0);
    const uint64_t table = uint64_t{h->grant_entries} * sizeof(GrantEntry);
    const uint64_t rb = grant::ring_bytes(h->ring_size);
    FUZZ_CHECK(table <= h->shared_bytes);
    FUZZ_CHECK(h->rx_ring_off >= table && h->rx_ring_off + rb <= h->shared_bytes);
    FUZZ_CHECK(h->tx_ring_off >= table && h->tx_ring_off + rb <= h->shared_bytes);
    FUZZ_CHECK(h->tx_ring_off >= h->rx_ring_off + rb || h->rx_ring_off >= h->tx_ring_off + rb);
    FUZZ_CHECK(h->data_bytes % kGrantPageBytes == 0 && h->data_bytes > 0);
}

}  // namespace
}  // namespace pvnet::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    if (in.ConsumeBool()) {
        pvnet::fuzz::fuzz_grants(in);
    } else {
        pvnet::fuzz::fuzz_hello(in);
    }
    return 0;
}
