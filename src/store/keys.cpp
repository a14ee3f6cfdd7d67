#include "store/keys.hpp"

#include <charconv>

#include "core/check.hpp"
#include "store/wire.hpp"

namespace kizuna::store {

void check_key(const std::string& key) {
  KIZUNA_CHECK_ARG(!key.empty(), "store keys cannot be empty");
  KIZUNA_CHECK_ARG(key.size() <= wire::kMaxKeyBytes, "key '", wire::printable(key, 40), "' is ",
                   key.size(), " bytes; store keys are at most ", wire::kMaxKeyBytes, " bytes");
}

void check_keys(const std::vector<std::string>& keys) {
  KIZUNA_CHECK_ARG(keys.size() <= wire::kMaxBatchKeys, keys.size(),
                   " keys in one call; the store takes at most ", wire::kMaxBatchKeys);
  for (const auto& key : keys) check_key(key);
}

std::optional<std::int64_t> parse_counter(const Bytes& value) {
  if (value.empty() || value.size() > 21) return std::nullopt;
  const char* first = reinterpret_cast<const char*>(value.data());
  const char* last = first + value.size();
  std::int64_t out = 0;
  const auto [ptr, ec] = std::from_chars(first, last, out);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return out;
}

Bytes counter_bytes(std::int64_t value) {
  const std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

std::optional<std::int64_t> add_to_counter(const std::string& key, const Bytes* current,
                                           std::int64_t delta, std::string& error) {
  std::int64_t base = 0;
  if (current != nullptr) {
    const auto parsed = parse_counter(*current);
    if (!parsed) {
      error = core::concat(
          "add: the value of key '", wire::printable(key), "' is not an integer ('",
          wire::printable(
              std::string_view(reinterpret_cast<const char*>(current->data()), current->size()),
              40),
          "')");
      return std::nullopt;
    }
    base = *parsed;
  }
  std::int64_t out = 0;
  if (__builtin_add_overflow(base, delta, &out)) {
    error = core::concat("add: ", base, " + ", delta, " overflows the 64-bit counter at key '",
                         wire::printable(key), "'");
    return std::nullopt;
  }
  return out;
}

std::string describe_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kListed = 8;
  std::string out = keys.size() == 1 ? "key " : "keys ";
  for (std::size_t i = 0; i < keys.size() && i < kListed; ++i) {
    if (i > 0) out += ", ";
    out += "'" + wire::printable(keys[i]) + "'";
  }
  if (keys.size() > kListed) out += core::concat(" and ", keys.size() - kListed, " more");
  if (keys.empty()) out += "(none)";
  return out;
}

std::string timeout_message(std::chrono::milliseconds timeout, const std::vector<std::string>& keys,
                            const std::vector<std::string>& missing, std::string_view where) {
  std::string out =
      core::concat("timed out after ", timeout.count(), " ms waiting for ", describe_keys(keys));
  if (keys.size() > 1 && !missing.empty()) {
    std::string list = describe_keys(missing);
    list = list.substr(list.find(' ') + 1);  // drop "key(s) "
    out += " (missing " + list + ")";
  }
  out += where;
  return out;
}

}  // namespace kizuna::store
