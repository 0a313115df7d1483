// cpu_relax: the spin-wait hint (Linux cpu_relax; PAUSE on x86) for every
// busy-poll loop, so a spinning thread yields the core's pipeline to its
// sibling and leaves the loop without a memory-order mis-speculation.
#pragma once

namespace pvnet {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace pvnet
