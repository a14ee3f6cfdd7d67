// The tuner's decisions (docs/tuning.md#tuner): synthetic profiles where
// one candidate must win, through make_tuning, choose_route and
// profiled_algorithm, so that no change of a built-in constant can flip
// what a measured profile decides.
#include <catch2/catch.hpp>

#include <functional>
#include <map>

#include "comm/route.hpp"
#include "comm/tuning.hpp"

using namespace kizuna;
using namespace kizuna::comm;

namespace {

using Times = std::map<Candidate, std::function<double(double bytes)>>;

// A section of `world` ranks on one node sharing memory, 8 B .. 64 MiB by
// factors of 4, each candidate timed by its function (the mailboxes only
// up to 1 KiB).
ProfileSection section(int world, const Times& times, bool symmetric = false) {
  ProfileSection s;
  s.key = ProfileKey{world, 1, world, true, symmetric};
  for (const auto& [c, f] : times) s.candidates.push_back(c);
  for (std::uint64_t bytes = 8; bytes <= (64u << 20); bytes *= 4) {
    ProfileSection::Row row{bytes, {}};
    for (const auto& [c, f] : times)
      row.us.push_back(c == Candidate::Mailbox && bytes > 1024 ? std::nan("") : f(double(bytes)));
    s.rows.push_back(row);
  }
  return s;
}

Facts node(int world, int cores) {
  Facts f;
  f.world = world;
  f.local_ranks = world;
  f.cores = cores;
  f.asymmetric_fence = true;
  f.mailbox_capacity = 1024;
  return f;
}

Profile profile_of(std::vector<ProfileSection> sections) {
  Profile p;
  p.sections = std::move(sections);
  p.source = "synthetic";
  return p;
}

const Paths kAll{true, true, false};

Route route(const Tuning& t, std::size_t bytes, Buffers buffers = Buffers::Host, const Paths& paths = kAll,
            Placement placement = Placement::Near) {
  return choose_route({CallKind::Collective, algo::Collective::AllReduce, bytes}, buffers, placement, paths, t);
}

// Linear costs: a + bytes / rate (rate in bytes per microsecond).
std::function<double(double)> cost(double a, double rate) {
  return [a, rate](double bytes) { return a + bytes / rate; };
}

const Times kRingWins{{Candidate::Mailbox, cost(0.3, 10000)}, {Candidate::Ring, cost(1.0, 9000)},
                      {Candidate::Tree, cost(1.5, 4000)},    {Candidate::OneShot, cost(1.2, 2000)},
                      {Candidate::TwoShot, cost(1.4, 7000)}, {Candidate::Doubling, cost(1.1, 3000)},
                      {Candidate::Staged, cost(3.0, 8000)}};
const Times kTwoShotWins{{Candidate::Mailbox, cost(0.3, 10000)}, {Candidate::Ring, cost(2.0, 6000)},
                         {Candidate::Tree, cost(1.5, 4000)},    {Candidate::OneShot, cost(1.2, 2000)},
                         {Candidate::TwoShot, cost(1.0, 9000)}, {Candidate::Doubling, cost(1.1, 3000)},
                         {Candidate::Staged, cost(3.0, 8000)}};
const Times kStagedWins{{Candidate::Mailbox, cost(0.3, 10000)}, {Candidate::Ring, cost(1.0, 4000)},
                        {Candidate::Tree, cost(1.5, 3000)},    {Candidate::OneShot, cost(1.2, 2000)},
                        {Candidate::TwoShot, cost(1.4, 3500)}, {Candidate::Doubling, cost(1.1, 2500)},
                        {Candidate::Staged, cost(4.0, 12000)}};

}  // namespace

TEST_CASE("tuner: a profile where ring must win", "[comm][tuner]") {
  const Profile p = profile_of({section(4, kRingWins)});
  const Tuning t = make_tuning(Settings{}, node(4, 8), &p);
  CHECK(t.profile == "synthetic");
  CHECK(route(t, 8) == Route::Mailbox);
  CHECK(route(t, 512) == Route::Mailbox);
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{1} << 20, std::size_t{64} << 20, std::size_t{1} << 30}) {
    INFO(bytes);
    CHECK(route(t, bytes) == Route::Schedule);
    CHECK(profiled_algorithm(bytes, Buffers::Host, Placement::Unknown, t) == Algorithm::Ring);
    // However near or far the placement probe finds the CPUs.
    CHECK(route(t, bytes, Buffers::Host, kAll, Placement::Far) == Route::Schedule);
  }
}

TEST_CASE("tuner: a profile where two-shot must win", "[comm][tuner]") {
  const Profile p = profile_of({section(4, kTwoShotWins)});
  const Tuning t = make_tuning(Settings{}, node(4, 8), &p);
  CHECK(route(t, 256) == Route::Mailbox);
  for (std::size_t bytes : {std::size_t{2048}, std::size_t{256} << 10, std::size_t{64} << 20}) {
    INFO(bytes);
    CHECK(route(t, bytes) == Route::Schedule);
    CHECK(profiled_algorithm(bytes, Buffers::Host, Placement::Unknown, t) == Algorithm::TwoShot);
  }
  // The parts of a device call take the same algorithm; device buffers
  // are not the table's.
  CHECK(profiled_algorithm(1 << 20, Buffers::Staging, Placement::Unknown, t) == Algorithm::TwoShot);
  CHECK_FALSE(profiled_algorithm(1 << 20, Buffers::Device, Placement::Unknown, t).has_value());
}

TEST_CASE("tuner: a profile where the staged route must win", "[comm][tuner]") {
  const Profile p = profile_of({section(2, kStagedWins)});
  const Tuning t = make_tuning(Settings{}, node(2, 2), &p);
  // Where the built-in rules would keep 2 near ranks on the slots below
  // 256 KiB (docs/tuning.md#staged-while-near), the measurement decides.
  CHECK(t.staged_near_from == 256u << 10);
  CHECK(route(t, 64 << 10, Buffers::Host, kAll, Placement::Near) == Route::Staged);
  CHECK(route(t, 64 << 20) == Route::Staged);
  CHECK_FALSE(profiled_algorithm(64 << 20, Buffers::Host, Placement::Unknown, t).has_value());
  // Small calls: ring (cheapest latency past the mailboxes).
  CHECK(route(t, 4096) == Route::Schedule);
  CHECK(profiled_algorithm(4096, Buffers::Host, Placement::Unknown, t) == Algorithm::Ring);
  // Without staging memory the rules decide.
  CHECK(route(t, 64 << 20, Buffers::Host, Paths{true, false, false}) == Route::Schedule);
  // A device call's parts are staged already: never the staged route.
  CHECK(route(t, 64 << 20, Buffers::Staging) == Route::Schedule);
}

TEST_CASE("tuner: symmetric buffers have their own table", "[comm][tuner]") {
  Times symmetric = kRingWins;
  symmetric[Candidate::Symmetric] = cost(2.0, 20000);
  const Profile p = profile_of({section(4, kRingWins), section(4, symmetric, true)});
  const Tuning t = make_tuning(Settings{}, node(4, 8), &p);
  REQUIRE_FALSE(t.symmetric_bands.empty());
  // classify looks up symmetric buffers from where the tables part.
  CHECK(t.symmetric_from > 1024);
  CHECK(t.symmetric_from < (64u << 10));
  CHECK(route(t, 64 << 20, Buffers::Symmetric) == Route::Symmetric);
  CHECK(route(t, 64 << 20, Buffers::Host) == Route::Schedule);
  CHECK(route(t, 8, Buffers::Symmetric) == Route::Mailbox);
}

TEST_CASE("tuner: the rules' choice stands unless measured clearly slower", "[comm][tuner]") {
  // 2 ranks each on a core: the rules take the staged route from 64 KiB.
  // Here two-shot is faster everywhere: by 3% from 64 KiB on (a tie the
  // rules keep), by 30% below (which the profile takes).
  const Times near_tie{{Candidate::Mailbox, cost(0.3, 10000)},
                       {Candidate::Ring, cost(2.0, 3000)},
                       {Candidate::TwoShot, cost(1.0, 10000)},
                       {Candidate::Staged, [](double bytes) { return bytes < 65536 ? 1.3 * (1.0 + bytes / 10000) : 1.03 * (1.0 + bytes / 10000); }}};
  const Profile p = profile_of({section(2, near_tie)});
  const Tuning t = make_tuning(Settings{}, node(2, 2), &p);
  CHECK(route(t, 16 << 10) == Route::Schedule);
  CHECK(profiled_algorithm(16 << 10, Buffers::Host, Placement::Unknown, t) == Algorithm::TwoShot);
  CHECK(route(t, 1 << 20) == Route::Staged);
  CHECK(route(t, 64 << 20) == Route::Staged);
}

TEST_CASE("tuner: what a profile does not decide", "[comm][tuner]") {
  const Profile p = profile_of({section(4, kStagedWins)});
  SECTION("another world: the rules") {
    const Tuning t = make_tuning(Settings{}, node(2, 8), &p);
    CHECK(t.profile.empty());
    CHECK(t.private_bands.empty());
  }
  SECTION("a forced algorithm: neither table nor fit") {
    Settings s;
    s.algorithm = Algorithm::Tree;
    const Tuning t = make_tuning(s, node(4, 8), &p);
    CHECK(t.profile.empty());
    CHECK(route(t, 64 << 20) == Route::Schedule);
  }
  SECTION("a route threshold set: the rules, with the fitted link") {
    Settings s;
    s.staged_from = std::size_t{1} << 30;
    const Tuning t = make_tuning(s, node(4, 8), &p);
    CHECK(t.profile == "synthetic");
    CHECK(t.private_bands.empty());
    CHECK(route(t, 64 << 20) == Route::Schedule);
    CHECK(t.link.alpha_us != make_tuning(s, node(4, 8)).link.alpha_us);
  }
  SECTION("over TCP: the shared-memory section is not the one") {
    Settings s;
    s.transport = Transport::Tcp;
    CHECK(make_tuning(s, node(4, 8), &p).profile.empty());
  }
}

TEST_CASE("tuner: a profile measured near and far decides by the placement the ranks agree on", "[comm][tuner]") {
  ProfileSection near = section(4, kRingWins), far = section(4, kTwoShotWins);
  near.placement = MeasuredPlacement::Near;
  far.placement = MeasuredPlacement::Far;
  const Profile both = profile_of({near, far});
  const Tuning t = make_tuning(Settings{}, node(4, 8), &both);
  REQUIRE_FALSE(t.near_private_bands.empty());
  CHECK(t.private_placement == MeasuredPlacement::Far);
  for (std::size_t bytes : {std::size_t{16} << 10, std::size_t{1} << 20}) {
    INFO(bytes);
    CHECK(profiled_algorithm(bytes, Buffers::Host, Placement::Near, t) == Algorithm::Ring);
    CHECK(profiled_algorithm(bytes, Buffers::Host, Placement::Far, t) == Algorithm::TwoShot);
    CHECK(profiled_algorithm(bytes, Buffers::Host, Placement::Unknown, t) == Algorithm::TwoShot);  // as far
  }
  // One of them alone decides whatever the placement.
  const Profile near_only = profile_of({near});
  const Tuning n = make_tuning(Settings{}, node(4, 8), &near_only);
  CHECK(n.near_private_bands.empty());
  CHECK(profiled_algorithm(1 << 20, Buffers::Host, Placement::Far, n) == Algorithm::Ring);
  CHECK(profiled_algorithm(1 << 20, Buffers::Host, Placement::Near, n) == Algorithm::Ring);
  const std::string text = t.describe();
  CHECK(text.find("measured with the CPUs near") != std::string::npos);
  CHECK(text.find("measured with the CPUs far apart") != std::string::npos);
}

TEST_CASE("tuner: describe names the profile and its bands", "[comm][tuner]") {
  const Profile p = profile_of({section(4, kRingWins)});
  const std::string text = make_tuning(Settings{}, node(4, 8), &p).describe();
  CHECK(text.find("profile      synthetic") != std::string::npos);
  CHECK(text.find("mailbox from 0 B, ring from") != std::string::npos);
  CHECK(text.find("measured with") == std::string::npos);  // no placement recorded

  ProfileSection far = section(4, kRingWins);
  far.placement = MeasuredPlacement::Far;
  const Profile q = profile_of({far});
  const Tuning t = make_tuning(Settings{}, node(4, 8), &q);
  CHECK(t.private_placement == MeasuredPlacement::Far);
  CHECK(t.describe().find("; measured with the CPUs far apart\n") != std::string::npos);
}
