// store/keys.hpp: what every Store implementation shares about keys and
// values: the decimal counters of add(), and the wording of errors, so that
// a HashStore, a TcpStore and its server say the same thing the same way.
#pragma once

#include <kizuna/store.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kizuna::store {

// Throws InvalidArgument for an empty key or one over 4 KiB.
void check_key(const std::string& key);
void check_keys(const std::vector<std::string>& keys);

// A counter's value: decimal text, optionally signed ("42", "-7"). nullopt
// when `value` is anything else.
std::optional<std::int64_t> parse_counter(const Bytes& value);
Bytes counter_bytes(std::int64_t value);

// current + delta for add(); nullopt on overflow or a non-counter value,
// with the reason in `error`.
std::optional<std::int64_t> add_to_counter(const std::string& key, const Bytes* current,
                                           std::int64_t delta, std::string& error);

// "key 'x'" or "keys 'a', 'b', 'c'" (at most eight listed, then "and N more").
std::string describe_keys(const std::vector<std::string>& keys);

// "timed out after 5000 ms waiting for key 'x' at store 127.0.0.1:4242"
// ("... waiting for keys 'a', 'b' (missing 'b') ..." for several keys).
// `where` is " at store H:P" or " in HashStore".
std::string timeout_message(std::chrono::milliseconds timeout, const std::vector<std::string>& keys,
                            const std::vector<std::string>& missing, std::string_view where);

}  // namespace kizuna::store
