#include "ddp/registration.hpp"

#include <kizuna/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "core/check.hpp"

namespace kizuna::ddp {

namespace {

constexpr std::size_t kDescriptionBytes = 512;

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::uint64_t fnv1a(const std::string& s) { return fnv1a(s.data(), s.size()); }

// Each rank's fixed-size text, gathered; truncated to kDescriptionBytes - 1.
std::vector<std::string> gather_text(Communicator& comm, const std::string& mine) {
  std::vector<char> send(kDescriptionBytes, '\0');
  std::memcpy(send.data(), mine.data(), std::min(mine.size(), kDescriptionBytes - 1));
  std::vector<char> all(kDescriptionBytes * comm.size());
  comm.all_gather(send.data(), all.data(), kDescriptionBytes, DataType::UInt8).wait();
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(all.data() + r * kDescriptionBytes);
  return out;
}

// "A on ranks 0, 2; B on rank 1", groups in order of their lowest rank.
std::string group_by_text(const std::vector<std::string>& texts) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(texts.size()); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == texts[r]; });
    if (it == groups.end()) groups.push_back({texts[r], {r}});
    else it->second.push_back(r);
  }
  std::string out;
  for (const auto& [text, ranks] : groups) {
    if (!out.empty()) out += "; ";
    out += text + " on " + describe_ranks(ranks);
  }
  return out;
}

}  // namespace

std::string describe(const Parameter& p) {
  std::ostringstream out;
  out << "'" << p.name << "' (" << name(p.dtype) << ", " << p.count << " element"
      << (p.count == 1 ? "" : "s") << " at byte " << p.offset;
  if (!p.shape.empty()) {
    out << ", shape [";
    for (std::size_t i = 0; i < p.shape.size(); ++i) out << (i ? ", " : "") << p.shape[i];
    out << "]";
  }
  out << ")";
  return out.str();
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

void verify_registration(Communicator& comm, const std::vector<Parameter>& params,
                         const std::string& options_description) {
  const int world = comm.size();
  std::vector<std::uint64_t> hashes;
  hashes.reserve(params.size());
  std::uint64_t registry = fnv1a(nullptr, 0);
  for (const auto& p : params) {
    hashes.push_back(fnv1a(describe(p)));
    registry = fnv1a(&hashes.back(), sizeof(std::uint64_t), registry);
  }

  // Round 1: the digests.
  const std::uint64_t mine[3] = {params.size(), registry, fnv1a(options_description)};
  std::vector<std::uint64_t> digests(3 * world);
  comm.all_gather(mine, digests.data(), 3, DataType::UInt64).wait();
  bool same_params = true, same_options = true;
  std::uint64_t max_count = 0;
  for (int r = 0; r < world; ++r) {
    same_params &= digests[3 * r] == digests[0] && digests[3 * r + 1] == digests[1];
    same_options &= digests[3 * r + 2] == digests[2];
    max_count = std::max(max_count, digests[3 * r]);
  }
  if (same_params && same_options) return;

  if (!same_params) {
    // Round 2: every parameter's hash, to find the first that differs.
    std::vector<std::uint64_t> padded(max_count, 0);
    std::copy(hashes.begin(), hashes.end(), padded.begin());
    std::vector<std::uint64_t> all(max_count * world);
    comm.all_gather(padded.data(), all.data(), max_count, DataType::UInt64).wait();
    std::uint64_t first = max_count;
    for (std::uint64_t i = 0; i < max_count && first == max_count; ++i)
      for (int r = 0; r < world; ++r) {
        const bool has = i < digests[3 * r], has0 = i < digests[0];
        if (has != has0 || all[r * max_count + i] != all[i]) {
          first = i;
          break;
        }
      }
    KIZUNA_CHECK_LT(first, max_count, "registries differ but no parameter does");
    // Round 3: what each rank has there.
    const std::string text =
        first < params.size() ? describe(params[first])
                              : "no parameter (" + std::to_string(params.size()) + " registered)";
    const auto texts = gather_text(comm, text);
    KIZUNA_THROW(ErrorCode::Mismatch, "Reducer: ranks registered different parameters (rank ",
                 comm.rank(), " of ", world, "): parameter #", first, " is ", group_by_text(texts));
  }

  const auto texts = gather_text(comm, options_description);
  KIZUNA_THROW(ErrorCode::Mismatch, "Reducer: ranks passed different ReducerOptions (rank ",
               comm.rank(), " of ", world, "): ", group_by_text(texts));
}

}  // namespace kizuna::ddp
