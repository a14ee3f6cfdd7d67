// core/env.hpp: the one place where environment variables are read.
//
// Env holds every KIZUNA_* setting, parsed and validated together: a bad
// value is an InvalidArgument naming the variable, the value and what is
// accepted. Env::get() parses the process environment once (thread-safe) and
// returns the same immutable object afterwards; if the environment is
// invalid, every call rethrows the same error. Env::parse() takes any lookup
// function, which is how the tests exercise every variable.
//
// Unknown KIZUNA_* names are not errors (other tools share the prefix), but
// each becomes a warning, with the closest known name when there is one.
//
// docs/env.md lists every variable; a unit test checks the two agree.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kizuna/comm_options.hpp>

#include "core/log.hpp"

namespace kizuna::core {

// How the staged all-reduce and the symmetric one write what peers read
// (comm/symmetric.hpp): as the placement probe says, through the caches,
// or with streaming stores.
enum class StagedStores { Auto, Cache, Stream };

struct Env {
  // Returns the value of a variable, or nullopt when it is unset.
  using Lookup = std::function<std::optional<std::string>(const std::string& name)>;

  LogLevel log_level = LogLevel::Warn;                 // KIZUNA_LOG
  std::string log_file;                                // KIZUNA_LOG_FILE ("" = stderr)
  std::chrono::milliseconds timeout{300'000};          // KIZUNA_TIMEOUT
  std::chrono::milliseconds store_timeout{60'000};     // KIZUNA_STORE_TIMEOUT
  std::string store_token;                             // KIZUNA_STORE_TOKEN ("" = no auth)
  // Every key of Store::from_env() lives under "<prefix>/"; kizuna-run sets
  // a fresh one per restart round so a new round sees no stale keys.
  std::string store_prefix;                            // KIZUNA_STORE_PREFIX ("" = none)
  // KIZUNA_STORE (host:port) is read with the launcher variables, in core/launch_env.

  Algorithm algo = Algorithm::Auto;                    // KIZUNA_ALGO
  std::uint64_t slice_bytes = 512 << 10;               // KIZUNA_SLICE_BYTES
  bool check = false;                                  // KIZUNA_CHECK
  bool join = false;                                   // KIZUNA_JOIN (kizuna-run --elastic's replacements)
  std::string socket_ifname;                           // KIZUNA_SOCKET_IFNAME
  Transport transport = Transport::Auto;               // KIZUNA_TRANSPORT
  std::uint64_t shm_bytes = 1 << 20;                   // KIZUNA_SHM_BYTES (per channel)
  std::int64_t symmetric_from = -1;                    // KIZUNA_SYMMETRIC_FROM (-1: auto)
  std::int64_t mailbox_upto = -1;                      // KIZUNA_MAILBOX_UPTO (-1: auto)
  std::int64_t staging_bytes = -1;                     // KIZUNA_STAGING_BYTES (-1: auto)
  std::int64_t staged_from = -1;                       // KIZUNA_STAGED_FROM (-1: auto)
  StagedStores staged_stores = StagedStores::Auto;     // KIZUNA_STAGED_STORES
  std::string tuning_file;                             // KIZUNA_TUNING_FILE ("" none)
  // "auto", "system" or a kernel congestion control name (transport/tcp/congestion.hpp).
  std::string tcp_congestion = "auto";                 // KIZUNA_TCP_CONGESTION
  int spin_us = -1;                                    // KIZUNA_SPIN_US (-1: auto)
  int yield_us = -1;                                   // KIZUNA_YIELD_US (-1: auto)
  bool dump_on_signal = false;                         // KIZUNA_DUMP_ON_SIGNAL
  // KIZUNA_DEVICE: "cpu" (default), "cuda" (the GPU LOCAL_RANK picks) or
  // "cuda:N"; device_index is N, or -1.
  std::string device = "cpu";
  int device_index = -1;
  bool cuda_ipc = true;                                // KIZUNA_CUDA_IPC
  bool cuda_stream_wait = true;                        // KIZUNA_CUDA_STREAM_WAIT
  // GPU to GPU FIFOs (cuda/ipc_world.hpp): channel sets (a block each) and
  // the bytes of a slot; 0: the defaults.
  int cuda_channels = 0;                               // KIZUNA_CUDA_CHANNELS
  // The ports a rank may listen on (lo, hi); 0, 0: any the OS gives.
  int port_low = 0, port_high = 0;                     // KIZUNA_PORT_RANGE
  std::uint64_t cuda_slot_bytes = 0;                   // KIZUNA_CUDA_SLOT_BYTES
  // The GPU-to-GPU link model: a round's us, a further message's us, GB/s
  // (docs/tuning.md#device-link-model); unset: the defaults.
  std::optional<std::array<double, 3>> cuda_link;      // KIZUNA_CUDA_LINK

  // Set variables whose names start with KIZUNA_ but that Env does not know,
  // each as a ready-to-log sentence.
  std::vector<std::string> warnings;

  // Parses from `lookup`; `names` lists the set variable names (used only to
  // find unknown KIZUNA_* names).
  static Env parse(const Lookup& lookup, const std::vector<std::string>& names = {});
  static const Env& get();

  // Every variable Env reads, for docs and the consistency test.
  static const std::vector<std::string_view>& known_variables();
};

// The process environment as a Lookup, and the names set in it.
Env::Lookup process_lookup();
std::vector<std::string> process_variable_names();

// "cpu", "cuda", "cuda:N" -> ("cpu"|"cuda", N or -1); InvalidArgument naming
// `variable` otherwise.
std::pair<std::string, int> parse_device(std::string_view variable, std::string_view text);

// "auto", "cache", "stream" (any case) -> the staged all-reduce's stores;
// InvalidArgument naming `variable` otherwise.
StagedStores parse_staged_stores(std::string_view variable, std::string_view text);

// Value parsers shared with the tools. Each throws InvalidArgument naming
// `variable` (an env var or a flag) and what it accepts.
//   durations: "30" (seconds), "30s", "1.5s", "500ms", "2m"; must be > 0
//   sizes: "4096", "64K", "64KiB", "1M", "1MiB", "2G" (binary multiples)
//   booleans: 1/0, true/false, yes/no, on/off
std::chrono::milliseconds parse_duration(std::string_view variable, std::string_view text);
std::uint64_t parse_size(std::string_view variable, std::string_view text);
// "auto" (-1), or a size (parse_size) in [min, max], or 0 when `zero_too`;
// otherwise InvalidArgument ending "accepted: " + `accepted`.
std::int64_t parse_auto_size(std::string_view variable, std::string_view text, std::uint64_t min,
                             std::uint64_t max, std::string_view accepted, bool zero_too = false);
bool parse_bool(std::string_view variable, std::string_view text);
std::int64_t parse_int(std::string_view variable, std::string_view text, std::int64_t min,
                       std::int64_t max);
// "LOW-HIGH" with 1 <= LOW <= HIGH <= 65535 (KIZUNA_PORT_RANGE, kizuna-run
// --port-range); otherwise InvalidArgument naming `variable` and the form.
std::pair<int, int> parse_port_range(std::string_view variable, std::string_view text);
// "ALPHA_US,MU_US,GBPS": a round's microseconds (> 0), a further message's
// (>= 0) and the bandwidth in GB/s (> 0); InvalidArgument naming
// `variable` otherwise.
std::array<double, 3> parse_link(std::string_view variable, std::string_view text);

}  // namespace kizuna::core
