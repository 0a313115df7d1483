// Names of the feature bits, for logs and `pvnet` output.
#include "pvnet/virtio/virtio_config.h"

namespace pvnet::virtio {

std::string_view feature_name(unsigned bit) noexcept {
    switch (bit) {
        case VIRTIO_F_NOTIFY_ON_EMPTY: return "VIRTIO_F_NOTIFY_ON_EMPTY";
        case VIRTIO_F_ANY_LAYOUT: return "VIRTIO_F_ANY_LAYOUT";
        case VIRTIO_RING_F_INDIRECT_DESC: return "VIRTIO_RING_F_INDIRECT_DESC";
        case VIRTIO_RING_F_EVENT_IDX: return "VIRTIO_RING_F_EVENT_IDX";
        case VIRTIO_F_VERSION_1: return "VIRTIO_F_VERSION_1";
        case VIRTIO_F_ACCESS_PLATFORM: return "VIRTIO_F_ACCESS_PLATFORM";
        case VIRTIO_F_RING_PACKED: return "VIRTIO_F_RING_PACKED";
        case VIRTIO_F_IN_ORDER: return "VIRTIO_F_IN_ORDER";
        case VIRTIO_NET_F_CSUM: return "VIRTIO_NET_F_CSUM";
        case VIRTIO_NET_F_GUEST_CSUM: return "VIRTIO_NET_F_GUEST_CSUM";
        case VIRTIO_NET_F_CTRL_GUEST_OFFLOADS: return "VIRTIO_NET_F_CTRL_GUEST_OFFLOADS";
        case VIRTIO_NET_F_MTU: return "VIRTIO_NET_F_MTU";
        case VIRTIO_NET_F_MAC: return "VIRTIO_NET_F_MAC";
        case VIRTIO_NET_F_GUEST_TSO4: return "VIRTIO_NET_F_GUEST_TSO4";
        case VIRTIO_NET_F_GUEST_TSO6: return "VIRTIO_NET_F_GUEST_TSO6";
        case VIRTIO_NET_F_GUEST_ECN: return "VIRTIO_NET_F_GUEST_ECN";
        case VIRTIO_NET_F_GUEST_UFO: return "VIRTIO_NET_F_GUEST_UFO";
        case VIRTIO_NET_F_HOST_TSO4: return "VIRTIO_NET_F_HOST_TSO4";
        case VIRTIO_NET_F_HOST_TSO6: return "VIRTIO_NET_F_HOST_TSO6";
        case VIRTIO_NET_F_HOST_ECN: return "VIRTIO_NET_F_HOST_ECN";
        case VIRTIO_NET_F_HOST_UFO: return "VIRTIO_NET_F_HOST_UFO";
        case VIRTIO_NET_F_MRG_RXBUF: return "VIRTIO_NET_F_MRG_RXBUF";
        case VIRTIO_NET_F_STATUS: return "VIRTIO_NET_F_STATUS";
        case VIRTIO_NET_F_CTRL_VQ: return "VIRTIO_NET_F_CTRL_VQ";
        case VIRTIO_NET_F_CTRL_RX: return "VIRTIO_NET_F_CTRL_RX";
        case VIRTIO_NET_F_MQ: return "VIRTIO_NET_F_MQ";
        case VIRTIO_NET_F_NOTF_COAL: return "VIRTIO_NET_F_NOTF_COAL";
        case VIRTIO_NET_F_HASH_REPORT: return "VIRTIO_NET_F_HASH_REPORT";
        case VIRTIO_NET_F_RSS: return "VIRTIO_NET_F_RSS";
        default: return "";
    }
}

}  // namespace pvnet::virtio
