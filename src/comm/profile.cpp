#include "comm/profile.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/check.hpp"

namespace kizuna::comm {
namespace {

constexpr std::string_view kMagic = "kizuna-tuning 1";
// Indexed by Candidate's values, in their order.
constexpr std::string_view kNames[] = {"mailbox", "ring", "tree", "oneshot", "twoshot", "doubling", "staged",
                                       "symmetric"};

// Whether sections of one key measured at placements a and b stand for
// the same placements: only one measured near and one far do not.
bool overlap(MeasuredPlacement a, MeasuredPlacement b) {
  return a == b || a == MeasuredPlacement::Unknown || b == MeasuredPlacement::Unknown;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// Reads the profile line by line; every error names the source and line.
class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Profile run() {
    Profile p;
    bool magic = false;
    ProfileSection* open = nullptr;
    std::string_view line;
    while (next(line)) {
      const std::vector<std::string_view> w = words(line);
      if (w.empty() || w[0].front() == '#') continue;
      if (!magic) {
        expect(line.substr(0, kMagic.size()) == kMagic && w.size() == 2,
               "the first line must be '", kMagic, "' (a profile of kizuna-perf --calibrate)");
        magic = true;
      } else if (w[0] == "section") {
        expect(open == nullptr, "'section' before the previous section's 'end'");
        ProfileSection s;
        s.key = key(w, s.placement);
        for (const auto& other : p.sections)
          expect(!(other.key == s.key && overlap(other.placement, s.placement)), "a second section ", describe(s.key),
                 " (two of one key must be one placement=near, one placement=far)");
        p.sections.push_back(std::move(s));
        open = &p.sections.back();
      } else if (w[0] == "candidates") {
        expect(open && open->candidates.empty() && open->rows.empty(), "'candidates' belongs once after 'section'");
        for (std::size_t i = 1; i < w.size(); ++i) {
          const auto c = parse_candidate(w[i]);
          expect(c.has_value(), "unknown candidate '", w[i], "'");
          expect(std::find(open->candidates.begin(), open->candidates.end(), *c) == open->candidates.end(),
                 "candidate '", w[i], "' twice");
          open->candidates.push_back(*c);
        }
        expect(!open->candidates.empty(), "'candidates' names none");
      } else if (w[0] == "end") {
        expect(open != nullptr, "'end' outside a section");
        expect(!open->rows.empty(), "section ", describe(open->key), " has no sizes");
        open = nullptr;
      } else {
        expect(open && !open->candidates.empty(), "a row outside a section's 'candidates'");
        open->rows.push_back(row(w, *open));
      }
    }
    expect(magic, "empty: the first line must be '", kMagic, "'");
    expect(open == nullptr, "the last section has no 'end'");
    return p;
  }

 private:
  bool next(std::string_view& line) {
    if (at_ >= text_.size()) return false;
    const std::size_t end = std::min(text_.find('\n', at_), text_.size());
    line = text_.substr(at_, end - at_);
    at_ = end + 1;
    ++number_;
    return true;
  }

  template <class... Args>
  void expect(bool ok, const Args&... what) const {
    if (!ok) KIZUNA_THROW(ErrorCode::InvalidArgument, "tuning profile ", source_, ", line ", number_, ": ", what...);
  }

  long integer(std::string_view text, long lo, long hi) const {
    long v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    expect(ec == std::errc() && end == text.data() + text.size() && v >= lo && v <= hi, "'", text,
           "' is not a whole number in ", lo, " .. ", hi);
    return v;
  }

  ProfileKey key(const std::vector<std::string_view>& w, MeasuredPlacement& placement) const {
    ProfileKey k;
    bool seen[5] = {};
    bool seen_placement = false;
    for (std::size_t i = 1; i < w.size(); ++i) {
      const std::size_t eq = w[i].find('=');
      expect(eq != std::string_view::npos, "'", w[i], "' is not name=value");
      const std::string_view name = w[i].substr(0, eq), value = w[i].substr(eq + 1);
      if (name == "world") k.world = static_cast<int>(integer(value, 1, 1 << 20)), seen[0] = true;
      else if (name == "nodes") k.nodes = static_cast<int>(integer(value, 1, 1 << 20)), seen[1] = true;
      else if (name == "local") k.local_ranks = static_cast<int>(integer(value, 1, 1 << 20)), seen[2] = true;
      else if (name == "transport") {
        expect(value == "shm" || value == "tcp", "transport='", value, "': accepted shm, tcp");
        k.shared_memory = value == "shm", seen[3] = true;
      } else if (name == "buffers") {
        expect(value == "private" || value == "symmetric", "buffers='", value, "': accepted private, symmetric");
        k.symmetric = value == "symmetric", seen[4] = true;
      } else if (name == "placement") {
        expect(!seen_placement, "placement= twice");
        seen_placement = true;
        expect(value == "near" || value == "far", "placement='", value, "': accepted near, far");
        placement = value == "near" ? MeasuredPlacement::Near : MeasuredPlacement::Far;
      } else {
        expect(false, "unknown field '", name, "' (accepted world, nodes, local, transport, buffers, placement)");
      }
    }
    expect(seen[0] && seen[1] && seen[2] && seen[3] && seen[4],
           "'section' needs world=, nodes=, local=, transport= and buffers=");
    return k;
  }

  ProfileSection::Row row(const std::vector<std::string_view>& w, const ProfileSection& s) const {
    expect(w.size() == s.candidates.size() + 1, "a row has a size and ", s.candidates.size(), " times; this has ",
           w.size() - 1);
    ProfileSection::Row r;
    r.bytes = static_cast<std::uint64_t>(integer(w[0], 1, std::numeric_limits<long>::max()));
    expect(s.rows.empty() || s.rows.back().bytes < r.bytes, "sizes must ascend: ", r.bytes, " after ",
           s.rows.empty() ? 0 : s.rows.back().bytes);
    for (std::size_t i = 1; i < w.size(); ++i) {
      if (w[i] == "-") {
        r.us.push_back(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      double v = 0;
      const auto [end, ec] = std::from_chars(w[i].data(), w[i].data() + w[i].size(), v);
      expect(ec == std::errc() && end == w[i].data() + w[i].size() && v > 0 && std::isfinite(v), "'", w[i],
             "' is not a time in microseconds (a positive number, or - when not measured)");
      r.us.push_back(v);
    }
    return r;
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t at_ = 0;
  std::size_t number_ = 0;
};

// Solves the |S| x |S| normal equations of the columns `use`; false when
// singular.
bool solve(const std::vector<std::array<double, 3>>& rows, const std::array<bool, 3>& use, std::array<double, 3>& x) {
  double a[3][4] = {};
  int idx[3], n = 0;
  for (int j = 0; j < 3; ++j)
    if (use[j]) idx[n++] = j;
  for (const auto& r : rows)  // each row: coefficients / time, target 1
    for (int p = 0; p < n; ++p) {
      for (int q = 0; q < n; ++q) a[p][q] += r[idx[p]] * r[idx[q]];
      a[p][n] += r[idx[p]];
    }
  for (int c = 0; c < n; ++c) {
    int best = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[best][c])) best = r;
    if (std::abs(a[best][c]) < 1e-300) return false;
    std::swap(a[c], a[best]);
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
    }
  }
  x = {0, 0, 0};
  for (int p = 0; p < n; ++p) x[idx[p]] = a[p][n] / a[p][p];
  return true;
}

}  // namespace

std::string_view name(Candidate c) { return kNames[static_cast<int>(c)]; }

std::optional<Candidate> parse_candidate(std::string_view text) {
  for (Candidate c : kAllCandidates)
    if (name(c) == text) return c;
  return std::nullopt;
}

Algorithm algorithm_of(Candidate c) {
  switch (c) {
    case Candidate::Ring: return Algorithm::Ring;
    case Candidate::Tree: return Algorithm::Tree;
    case Candidate::OneShot: return Algorithm::OneShot;
    case Candidate::TwoShot: return Algorithm::TwoShot;
    case Candidate::Doubling: return Algorithm::Doubling;
    default: return Algorithm::Auto;
  }
}

Candidate schedule_candidate(Algorithm a) {
  switch (a) {
    case Algorithm::Tree: return Candidate::Tree;
    case Algorithm::OneShot: return Candidate::OneShot;
    case Algorithm::TwoShot: return Candidate::TwoShot;
    case Algorithm::Doubling: return Candidate::Doubling;
    default: return Candidate::Ring;
  }
}

std::string_view name(MeasuredPlacement p) {
  switch (p) {
    case MeasuredPlacement::Near: return "near";
    case MeasuredPlacement::Far: return "far";
    case MeasuredPlacement::Unknown: break;
  }
  return "unknown";
}

std::string describe(const ProfileKey& k) {
  return "world=" + std::to_string(k.world) + " nodes=" + std::to_string(k.nodes) +
         " local=" + std::to_string(k.local_ranks) + " transport=" + (k.shared_memory ? "shm" : "tcp") +
         " buffers=" + (k.symmetric ? "symmetric" : "private");
}

Profile Profile::parse(std::string_view text, const std::string& source) { return Parser(text, source).run(); }

std::string Profile::text() const {
  std::ostringstream out;
  out << kMagic << "\n# all-reduce, float32, sum, in place: microseconds per call by each candidate\n";
  for (const auto& s : sections) {
    out << "section " << describe(s.key);
    if (s.placement != MeasuredPlacement::Unknown) out << " placement=" << name(s.placement);
    out << "\ncandidates";
    for (Candidate c : s.candidates) out << ' ' << name(c);
    out << '\n';
    for (const auto& r : s.rows) {
      out << r.bytes;
      char buf[32];
      for (double us : r.us) {
        if (std::isnan(us)) out << " -";
        else std::snprintf(buf, sizeof buf, " %.4g", us), out << buf;
      }
      out << '\n';
    }
    out << "end\n";
  }
  return out.str();
}

const ProfileSection* Profile::find(const ProfileKey& key) const {
  for (const auto& s : sections)
    if (s.key == key) return &s;
  return nullptr;
}

void Profile::put(ProfileSection section) {
  const ProfileKey key = section.key;
  const MeasuredPlacement placement = section.placement;
  const auto replaced = [&](const ProfileSection& s) { return s.key == key && overlap(s.placement, placement); };
  const auto first = std::find_if(sections.begin(), sections.end(), replaced);
  if (first == sections.end()) {
    sections.push_back(std::move(section));
    return;
  }
  *first = std::move(section);  // in the first one's place
  sections.erase(std::remove_if(std::next(first), sections.end(), replaced), sections.end());
}

namespace detail {

std::vector<Band> bands_of(const ProfileSection& s, const std::vector<std::vector<bool>>& allowed,
                           const std::vector<int>& preferred) {
  std::vector<Band> bands;
  std::uint64_t previous = 0;
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    const auto& row = s.rows[i];
    int best = -1;
    for (std::size_t c = 0; c < s.candidates.size(); ++c) {
      if (!allowed[i][c] || std::isnan(row.us[c])) continue;
      if (best < 0 || row.us[c] < row.us[best]) best = static_cast<int>(c);
    }
    if (best < 0) continue;
    const int p = preferred[i];
    if (p >= 0 && allowed[i][p] && !std::isnan(row.us[p]) && row.us[p] <= row.us[best] * (1 + kPreferWithin)) best = p;
    const Candidate chosen = s.candidates[best];
    if (bands.empty()) {
      bands.push_back({0, chosen});
    } else if (bands.back().candidate != chosen) {
      // Halfway between the two sizes, on a log scale.
      const auto from = static_cast<std::uint64_t>(std::llround(std::sqrt(double(previous) * double(row.bytes))));
      bands.push_back({std::max(from, bands.back().from + 1), chosen});
    }
    previous = row.bytes;
  }
  return bands;
}

}  // namespace detail

std::vector<Band> decide(const ProfileSection& section) {
  return decide(
      section, [](Candidate, std::uint64_t) { return true; },
      [](std::uint64_t) { return std::optional<Candidate>(); });
}

Candidate pick(const std::vector<Band>& bands, std::uint64_t bytes) {
  Candidate c = bands.front().candidate;
  for (const Band& b : bands) {
    if (b.from > bytes) break;
    c = b.candidate;
  }
  return c;
}

algo::LinkModel fit_link(const ProfileSection& s, const algo::LinkModel& fallback) {
  // predicted_us is linear in (alpha, beta, mu): its coefficients are its
  // values under unit models.
  algo::LinkModel unit[3];
  unit[0].alpha_us = 1, unit[0].beta_us_per_byte = 0, unit[0].message_us = 0;
  unit[1].alpha_us = 0, unit[1].beta_us_per_byte = 1, unit[1].message_us = 0;
  unit[2].alpha_us = 0, unit[2].beta_us_per_byte = 0, unit[2].message_us = 1;
  std::vector<std::array<double, 3>> rows;
  bool mu_seen = false;
  for (const auto& row : s.rows)
    for (std::size_t c = 0; c < s.candidates.size(); ++c) {
      if (!is_schedule(s.candidates[c]) || std::isnan(row.us[c])) continue;
      std::array<double, 3> r;
      for (int j = 0; j < 3; ++j)
        r[j] = algo::predicted_us(algo::Collective::AllReduce, algorithm_of(s.candidates[c]), row.bytes, s.key.world,
                                  unit[j]) /
               row.us[c];
      mu_seen |= r[2] > 0;
      rows.push_back(r);
    }
  algo::LinkModel link = fallback;
  if (rows.empty()) return link;
  // Every subset of the terms, the best fit with none negative.
  double best_error = std::numeric_limits<double>::infinity();
  std::array<double, 3> best{};
  for (int mask = 1; mask < 8; ++mask) {
    const std::array<bool, 3> use{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    if (use[2] && !mu_seen) continue;
    std::array<double, 3> x;
    if (!solve(rows, use, x) || x[0] < 0 || x[1] < 0 || x[2] < 0) continue;
    double error = 0;
    for (const auto& r : rows) {
      const double e = r[0] * x[0] + r[1] * x[1] + r[2] * x[2] - 1;
      error += e * e;
    }
    if (error < best_error) best_error = error, best = x;
  }
  if (!std::isfinite(best_error)) return link;
  link.alpha_us = best[0];
  link.beta_us_per_byte = best[1] > 0 ? best[1] : fallback.beta_us_per_byte;
  if (mu_seen) link.message_us = best[2];
  link.large_all_reduce_from = UINT64_MAX;
  return link;
}

}  // namespace kizuna::comm
