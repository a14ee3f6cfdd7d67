// core/stream_copy.hpp: memcpy with non-temporal stores.
//
// What it writes goes to memory, past this core's caches, instead of
// staying there dirty. A reader on a core of another cache domain (another
// CCX or die of an AMD EPYC, another socket) then reads it from memory,
// where a copy left in the writer's cache would have to be fetched line by
// line from that cache: on this project's machine 10-11 GB/s for a 256 KiB
// block handed from one core to the other against 5 GB/s
// (docs/symmetric-memory.md#where-the-staging-goes). A reader sharing the
// writer's caches loses: it would have found the copy there.
//
// Pointers need no alignment; the regions must not overlap. Thread-safe.
// On other architectures than x86-64 it is memcpy.
#pragma once

#include <cstddef>

namespace kizuna::core {

void stream_copy(void* dst, const void* src, std::size_t bytes);

}  // namespace kizuna::core
