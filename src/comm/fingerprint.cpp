#include "comm/fingerprint.hpp"

#include <algorithm>
#include <sstream>

namespace kizuna::comm {
namespace {

void put64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

FingerprintBytes encode(const Fingerprint& f) {
  FingerprintBytes b{};
  b[0] = static_cast<unsigned char>(f.collective);
  b[1] = static_cast<unsigned char>(f.dtype);
  b[2] = static_cast<unsigned char>(f.op);
  b[3] = f.symmetric ? 1 : 0;
  put64(b.data() + 8, static_cast<std::uint64_t>(static_cast<std::int64_t>(f.root)));
  put64(b.data() + 16, f.count);
  put64(b.data() + 24, f.seq);
  return b;
}

Fingerprint decode(const unsigned char* b) {
  Fingerprint f;
  f.collective = static_cast<algo::Collective>(b[0]);
  f.dtype = static_cast<DataType>(b[1]);
  f.op = static_cast<ReduceOp>(b[2]);
  f.symmetric = b[3] != 0;
  f.root = static_cast<int>(static_cast<std::int64_t>(get64(b + 8)));
  f.count = get64(b + 16);
  f.seq = get64(b + 24);
  return f;
}

std::string describe(const Fingerprint& f) {
  std::ostringstream out;
  out << algo::name(f.collective) << "(count " << f.count << ", " << name(f.dtype);
  if (f.collective == algo::Collective::AllReduce || f.collective == algo::Collective::Reduce ||
      f.collective == algo::Collective::ReduceScatter)
    out << ", " << name(f.op);
  if (f.collective == algo::Collective::Broadcast || f.collective == algo::Collective::Reduce)
    out << ", root " << f.root;
  out << ") #" << f.seq;
  if (f.symmetric) out << " on symmetric memory";
  return out.str();
}

std::string compare(const std::vector<Fingerprint>& by_rank) {
  bool same = true;
  for (const Fingerprint& f : by_rank) same &= f == by_rank.front();
  if (same) return "";
  std::vector<std::pair<Fingerprint, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == by_rank[r]; });
    if (it == groups.end()) groups.push_back({by_rank[r], {r}});
    else it->second.push_back(r);
  }
  std::ostringstream out;
  for (const auto& [f, ranks] : groups) {
    out << "\n  rank" << (ranks.size() > 1 ? "s" : "");
    for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << " " << ranks[i];
    out << " called " << describe(f);
  }
  return out.str();
}

}  // namespace kizuna::comm
