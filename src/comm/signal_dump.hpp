// comm/signal_dump.hpp: KIZUNA_DUMP_ON_SIGNAL=1 — SIGUSR1 makes a live rank
// print the recent collectives of every communicator it holds, so a hung
// job can be inspected without killing it (`kill -USR1 <pid>`).
//
// The signal handler only writes a byte to a pipe (async-signal-safe); a
// background thread reads it and prints each registered communicator's
// report to stderr. Communicators register on creation and unregister on
// destruction; without the variable nothing is installed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace kizuna::comm {

using DumpReporter = std::function<std::string()>;

// Returns a handle for unregister_dump (0 when dumping is off).
std::uint64_t register_dump(DumpReporter reporter);
void unregister_dump(std::uint64_t handle);

}  // namespace kizuna::comm
