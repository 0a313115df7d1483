#include "pvnet/frontend/xps.h"

#include <algorithm>
#include <cctype>

namespace pvnet::frontend {

namespace {
int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
// skb_tx_hash's reciprocal_scale: (hash * n) >> 32.
uint16_t reciprocal_scale(uint32_t hash, uint32_t n) {
    return static_cast<uint16_t>((uint64_t{hash} * n) >> 32);
}
}  // namespace

// Linux lib/bitmap-str.c bitmap_parse: groups parsed from the end; each is at
// most 8 hex digits (else -EOVERFLOW), an empty group is -EINVAL, a set bit
// beyond nmaskbits is -EOVERFLOW; strings are trimmed of whitespace first.
std::optional<std::string> XpsMask::parse(std::string_view s, unsigned nbits, XpsMask& out) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    if (s.empty()) return "empty mask";
    std::vector<std::string_view> groups;
    for (size_t start = 0;;) {
        size_t comma = s.find(',', start);
        groups.push_back(s.substr(start, comma == s.npos ? s.npos : comma - start));
        if (comma == s.npos) break;
        start = comma + 1;
    }
    XpsMask m;
    const size_t n = groups.size();
    for (size_t g = 0; g < n; ++g) {
        std::string_view grp = groups[g];
        std::string where = "group " + std::to_string(g + 1) + " of " + std::to_string(n);
        if (grp.empty()) return where + " is empty";
        if (grp.size() > 8) return where + " '" + std::string(grp) + "' has more than 8 hex digits";
        uint32_t v = 0;
        for (size_t i = 0; i < grp.size(); ++i) {
            int h = hexval(grp[i]);
            if (h < 0)
                return where + ": '" + std::string(1, grp[i]) + "' at position " +
                       std::to_string(i + 1) + " is not a hex digit";
            v = (v << 4) | static_cast<uint32_t>(h);
        }
        const unsigned base = static_cast<unsigned>(n - 1 - g) * 32;
        for (unsigned b = 0; b < 32; ++b) {
            if (!(v >> b & 1)) continue;
            if (base + b >= nbits || base + b >= kXpsMaxBits)
                return where + ": bit " + std::to_string(base + b) + " is beyond the " +
                       std::to_string(nbits) + " the device has";
            m.bits.set(base + b);
        }
    }
    out = m;
    return std::nullopt;
}

std::string XpsMask::format(unsigned nbits) const {
    static const char* hex = "0123456789abcdef";
    const unsigned ngroups = nbits == 0 ? 1 : (nbits + 31) / 32;
    std::string out;
    for (unsigned g = ngroups; g-- > 0;) {
        uint32_t v = 0;
        for (unsigned b = 0; b < 32 && g * 32 + b < kXpsMaxBits; ++b)
            if (bits.test(g * 32 + b)) v |= 1u << b;
        std::string grp(8, '0');
        for (size_t i = 8; i-- > 0; v >>= 4) grp[i] = hex[v & 0xf];
        if (g != ngroups - 1) out += ',';
        out += grp;
    }
    return out;
}

Xps::Xps(uint16_t num_txq, uint16_t num_rxq, uint16_t num_cpus)
    : num_txq_(num_txq), num_rxq_(num_rxq), num_cpus_(num_cpus) {
    auto m = std::make_unique<Map>();
    m->rxqs.resize(num_txq);
    m->cpus.resize(num_txq);
    m->by_rxq.resize(num_rxq);
    m->by_cpu.resize(num_cpus);
    map_.store(m.get(), std::memory_order_release);
    versions_.push_back(std::move(m));
}

Xps::~Xps() = default;

void Xps::publish(std::unique_ptr<Map> m) {
    // Invert the per-tx-queue masks into per-rxq / per-cpu queue lists.
    for (auto& v : m->by_rxq) v.clear();
    for (auto& v : m->by_cpu) v.clear();
    for (uint16_t t = 0; t < num_txq_; ++t) {
        for (uint16_t r = 0; r < num_rxq_; ++r)
            if (m->rxqs[t].bits.test(r)) m->by_rxq[r].push_back(t);
        for (uint16_t c = 0; c < num_cpus_; ++c)
            if (m->cpus[t].bits.test(c)) m->by_cpu[c].push_back(t);
    }
    map_.store(m.get(), std::memory_order_release);
    versions_.push_back(std::move(m));
}

std::optional<std::string> Xps::update(uint16_t txq, std::string_view mask, bool rxqs) {
    if (txq >= num_txq_)
        return "tx queue " + std::to_string(txq) + " out of range (" + std::to_string(num_txq_) + ")";
    XpsMask parsed;
    if (auto err = XpsMask::parse(mask, rxqs ? num_rxq_ : num_cpus_, parsed)) return err;
    std::lock_guard lock(mutex_);
    auto m = std::make_unique<Map>(*map_.load(std::memory_order_relaxed));
    (rxqs ? m->rxqs : m->cpus)[txq] = parsed;
    publish(std::move(m));
    return std::nullopt;
}

std::optional<std::string> Xps::set_rxqs(uint16_t txq, std::string_view mask) {
    return update(txq, mask, true);
}
std::optional<std::string> Xps::set_cpus(uint16_t txq, std::string_view mask) {
    return update(txq, mask, false);
}

void Xps::symmetric(uint16_t n) {
    std::lock_guard lock(mutex_);
    auto m = std::make_unique<Map>(*map_.load(std::memory_order_relaxed));
    for (uint16_t t = 0; t < num_txq_; ++t) {
        m->rxqs[t].bits.reset();
        if (t < n && t < num_rxq_) m->rxqs[t].bits.set(t);
    }
    publish(std::move(m));
}

std::vector<unsigned> Xps::virtnet_set_affinity(uint16_t pairs) {
    std::vector<unsigned> irq_cpu;
    if (pairs == 0 || num_cpus_ == 0) return irq_cpu;
    pairs = std::min(pairs, num_txq_);
    const unsigned stride = std::max(1u, unsigned{num_cpus_} / pairs);
    const unsigned stragglers = num_cpus_ >= pairs ? unsigned{num_cpus_} % pairs : 0u;
    std::lock_guard lock(mutex_);
    auto m = std::make_unique<Map>(*map_.load(std::memory_order_relaxed));
    unsigned cpu = 0;
    for (uint16_t q = 0; q < num_txq_; ++q) {
        m->cpus[q].bits.reset();
        if (q >= pairs) continue;
        irq_cpu.push_back(cpu);
        const unsigned group = stride + (q < stragglers ? 1 : 0);
        for (unsigned j = 0; j < group; ++j) {
            m->cpus[q].bits.set(cpu);
            cpu = (cpu + 1) % num_cpus_;
        }
    }
    publish(std::move(m));
    return irq_cpu;
}

// get_xps_queue: the rx-queue map first (if the socket has sk_rx_queue_mapping),
// then the CPU map; within a map with several queues, reciprocal_scale of the
// flow hash picks one. Neither → skb_tx_hash.
XpsPick Xps::pick(std::optional<uint16_t> rx_queue, unsigned cpu, uint32_t hash) const noexcept {
    const Map* m = map_.load(std::memory_order_acquire);
    if (rx_queue && *rx_queue < m->by_rxq.size()) {
        const auto& qs = m->by_rxq[*rx_queue];
        if (!qs.empty())
            return {qs.size() == 1 ? qs[0] : qs[reciprocal_scale(hash, static_cast<uint32_t>(qs.size()))], XpsRule::Rxqs};
    }
    if (cpu < m->by_cpu.size()) {
        const auto& qs = m->by_cpu[cpu];
        if (!qs.empty())
            return {qs.size() == 1 ? qs[0] : qs[reciprocal_scale(hash, static_cast<uint32_t>(qs.size()))], XpsRule::Cpus};
    }
    return {reciprocal_scale(hash, num_txq_), XpsRule::Hash};
}

}  // namespace pvnet::frontend
