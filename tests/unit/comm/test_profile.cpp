// Tuning profiles (comm/profile.hpp): the text form and its errors, the
// decision per size, and the alpha-beta fit.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "comm/profile.hpp"
#include "error_of.hpp"

using namespace kizuna;
using namespace kizuna::comm;
using Catch::Matchers::Contains;

namespace {

const char* kText =
    "kizuna-tuning 1\n"
    "# a comment\n"
    "\n"
    "section world=2 nodes=1 local=2 transport=shm buffers=private\n"
    "candidates mailbox ring twoshot staged\n"
    "8 0.3 1.5 1.2 2.8\n"
    "1024 1.2 2 1.9 3.1\n"
    "65536 - 13 14 9\n"
    "end\n"
    "section world=4 nodes=1 local=4 transport=tcp buffers=private\n"
    "candidates ring tree\n"
    "8 60 50\n"
    "end\n";

Error parse_error(const std::string& text) {
  return test::error_of_call([&] { Profile::parse(text, "p.txt"); });
}

}  // namespace

TEST_CASE("profile: text parses and writes back the same", "[comm][profile]") {
  const Profile p = Profile::parse(kText, "p.txt");
  REQUIRE(p.sections.size() == 2);
  const ProfileSection& s = p.sections[0];
  CHECK(s.key == ProfileKey{2, 1, 2, true, false});
  REQUIRE(s.candidates.size() == 4);
  CHECK(s.candidates[3] == Candidate::Staged);
  REQUIRE(s.rows.size() == 3);
  CHECK(s.rows[2].bytes == 65536);
  CHECK(std::isnan(s.rows[2].us[0]));
  CHECK(s.rows[2].us[3] == 9.0);
  CHECK_FALSE(p.sections[1].key.shared_memory);
  const Profile again = Profile::parse(p.text(), "again");
  CHECK(again.text() == p.text());
  CHECK(again.find(ProfileKey{4, 1, 4, false, false}) != nullptr);
  CHECK(again.find(ProfileKey{4, 1, 4, true, false}) == nullptr);
}

TEST_CASE("profile: put replaces the section of the same key", "[comm][profile]") {
  Profile p = Profile::parse(kText, "p.txt");
  ProfileSection s = p.sections[1];
  s.rows[0].us = {1, 2};
  p.put(s);
  REQUIRE(p.sections.size() == 2);
  CHECK(p.sections[1].rows[0].us[0] == 1.0);
  s.key.world = 8, s.key.local_ranks = 8;
  p.put(s);
  CHECK(p.sections.size() == 3);
}

TEST_CASE("profile: a malformed profile names its line and what is wrong", "[comm][profile]") {
  struct Case {
    std::string text, says;
  } cases[] = {
      {"", "empty"},
      {"kizuna-tuning 2\n", "line 1: the first line must be"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=ib buffers=private\n", "line 2: transport='ib'"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm\n", "needs world=, nodes=, local="},
      {"kizuna-tuning 1\nsection world=0 nodes=1 local=2 transport=shm buffers=private\n", "'0' is not a whole number"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private\ncandidates ring fast\n",
       "line 3: unknown candidate 'fast'"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private\ncandidates ring\n8 1 2\nend\n",
       "line 4: a row has a size and 1 times; this has 2"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private\ncandidates ring\n8 1\n8 2\nend\n",
       "line 5: sizes must ascend"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private\ncandidates ring\n8 -3\nend\n",
       "'-3' is not a time"},
      {"kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private\ncandidates ring\n8 1\n",
       "the last section has no 'end'"},
      {"kizuna-tuning 1\n8 1\n", "line 2: a row outside"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const Error e = parse_error(c.text);
    CHECK(e.code() == ErrorCode::InvalidArgument);
    CHECK_THAT(e.what(), Contains("tuning profile p.txt") && Contains(c.says));
  }
}

TEST_CASE("profile: a section says where the CPUs were while it was measured, through its text", "[comm][profile]") {
  Profile p = Profile::parse(kText, "p.txt");
  CHECK(p.sections[0].placement == MeasuredPlacement::Unknown);
  CHECK(p.text().find("placement=") == std::string::npos);  // unknown is left out
  const MeasuredPlacement all[] = {MeasuredPlacement::Near, MeasuredPlacement::Far};
  for (MeasuredPlacement m : all) {
    p.sections[0].placement = m;
    const std::string text = p.text();
    CHECK_THAT(text, Contains("buffers=private placement=" + std::string(name(m)) + "\n"));
    const Profile again = Profile::parse(text, "again");
    CHECK(again.sections[0].placement == m);
    CHECK(again.sections[1].placement == MeasuredPlacement::Unknown);
    CHECK(again.find(p.sections[0].key) != nullptr);  // not part of the key
  }
  const Error e = parse_error(
      "kizuna-tuning 1\nsection world=2 nodes=1 local=2 transport=shm buffers=private placement=close\n");
  CHECK(e.code() == ErrorCode::InvalidArgument);
  CHECK_THAT(e.what(), Contains("line 2: placement='close': accepted near, far"));
}

TEST_CASE("profile: one key may hold a section measured near and one far, and put keeps them apart",
          "[comm][profile]") {
  Profile p = Profile::parse(kText, "p.txt");
  ProfileSection near = p.sections[0], far = p.sections[0];
  near.placement = MeasuredPlacement::Near;
  far.placement = MeasuredPlacement::Far;
  far.rows[0].us[0] = 9;
  p.put(near);  // replaces the unknown one
  REQUIRE(p.sections.size() == 2);
  p.put(far);  // beside the near one
  REQUIRE(p.sections.size() == 3);
  CHECK(p.sections[0].placement == MeasuredPlacement::Near);
  CHECK(p.sections[2].placement == MeasuredPlacement::Far);
  far.rows[0].us[0] = 7;
  p.put(far);  // replaces the far one only
  REQUIRE(p.sections.size() == 3);
  CHECK(p.sections[2].rows[0].us[0] == 7);
  const Profile again = Profile::parse(p.text(), "again");  // two of one key parse
  CHECK(again.text() == p.text());
  p.put(p.sections[1]);  // another key: nothing replaced
  CHECK(p.sections.size() == 3);
  ProfileSection any = near;
  any.placement = MeasuredPlacement::Unknown;
  p.put(any);  // stands for every placement: replaces the near and the far one
  REQUIRE(p.sections.size() == 2);
  CHECK(p.sections[0].placement == MeasuredPlacement::Unknown);

  const Error e = parse_error(std::string(kText).substr(0, std::string(kText).find("section world=4")) +
                              "section world=2 nodes=1 local=2 transport=shm buffers=private placement=far\n"
                              "candidates ring\n8 1\nend\n");
  CHECK_THAT(e.what(), Contains("a second section world=2") && Contains("one placement=near, one placement=far"));
}

TEST_CASE("profile: decide takes the fastest per size, bands halfway between sizes", "[comm][profile]") {
  const Profile p = Profile::parse(kText, "p.txt");
  const std::vector<Band> bands = decide(p.sections[0]);
  // 8: mailbox; 1024: mailbox; 65536: staged, from sqrt(1024 * 65536).
  REQUIRE(bands.size() == 2);
  CHECK(bands[0] == Band{0, Candidate::Mailbox});
  CHECK(bands[1] == Band{8192, Candidate::Staged});
  CHECK(pick(bands, 1) == Candidate::Mailbox);
  CHECK(pick(bands, 8191) == Candidate::Mailbox);
  CHECK(pick(bands, 8192) == Candidate::Staged);
  CHECK(pick(bands, 1ull << 40) == Candidate::Staged);
  // Without the mailboxes and the staged route: two-shot, then ring.
  const std::vector<Band> schedules =
      decide(p.sections[0], [](Candidate c, std::uint64_t) { return is_schedule(c); },
             [](std::uint64_t) { return std::optional<Candidate>(); });
  REQUIRE(schedules.size() == 2);
  CHECK(schedules[0] == Band{0, Candidate::TwoShot});
  CHECK(schedules[1] == Band{8192, Candidate::Ring});
}

TEST_CASE("profile: a preferred candidate within 5% of the fastest is kept", "[comm][profile]") {
  ProfileSection s;
  s.key = ProfileKey{2, 1, 2, true, false};
  s.candidates = {Candidate::Ring, Candidate::TwoShot, Candidate::Staged};
  s.rows.push_back({1 << 20, {100, 90, 94}});   // staged 4% behind two-shot
  s.rows.push_back({4 << 20, {400, 360, 396}});  // staged 10% behind
  const auto all = [](Candidate, std::uint64_t) { return true; };
  const std::vector<Band> bands = decide(s, all, [](std::uint64_t) { return std::optional(Candidate::Staged); });
  REQUIRE(bands.size() == 2);
  CHECK(bands[0] == Band{0, Candidate::Staged});
  CHECK(bands[1] == Band{2 << 20, Candidate::TwoShot});
  // A preference that is not allowed, or not measured, is no preference.
  const auto no_staged = [](Candidate c, std::uint64_t) { return c != Candidate::Staged; };
  CHECK(decide(s, no_staged, [](std::uint64_t) { return std::optional(Candidate::Staged); }).front().candidate ==
        Candidate::TwoShot);
  CHECK(decide(s, all, [](std::uint64_t) { return std::optional(Candidate::Mailbox); }).front().candidate ==
        Candidate::TwoShot);
}

TEST_CASE("profile: the fit recovers the link a profile was made from", "[comm][profile]") {
  algo::LinkModel truth;
  truth.alpha_us = 3.5;
  truth.beta_us_per_byte = 1.0 / 6000.0;  // 6 GB/s
  truth.message_us = 0.7;
  ProfileSection s;
  s.key = ProfileKey{4, 1, 4, true, false};
  s.candidates = {Candidate::Mailbox, Candidate::Ring, Candidate::Tree, Candidate::OneShot, Candidate::TwoShot,
                  Candidate::Doubling, Candidate::Staged};
  for (std::uint64_t bytes = 8; bytes <= (64u << 20); bytes *= 4) {
    ProfileSection::Row row{bytes, {}};
    for (Candidate c : s.candidates)
      row.us.push_back(is_schedule(c) ? algo::predicted_us(algo::Collective::AllReduce, algorithm_of(c), bytes, 4, truth)
                                      : 1.0);  // the others are not the model's: left out of the fit
    s.rows.push_back(row);
  }
  const algo::LinkModel fitted = fit_link(s, algo::LinkModel{});
  CHECK(fitted.alpha_us == Approx(truth.alpha_us).epsilon(1e-6));
  CHECK(fitted.beta_us_per_byte == Approx(truth.beta_us_per_byte).epsilon(1e-6));
  CHECK(fitted.message_us == Approx(truth.message_us).epsilon(1e-6));
  CHECK(fitted.large_all_reduce_from == UINT64_MAX);

  // With 2 ranks no schedule sends a further message in a round: mu stays
  // the fallback's.
  s.key.world = 2, s.key.local_ranks = 2;
  for (auto& row : s.rows)
    for (std::size_t c = 0; c < s.candidates.size(); ++c)
      if (is_schedule(s.candidates[c]))
        row.us[c] = algo::predicted_us(algo::Collective::AllReduce, algorithm_of(s.candidates[c]), row.bytes, 2, truth);
  algo::LinkModel fallback;
  fallback.message_us = 9;
  const algo::LinkModel two = fit_link(s, fallback);
  CHECK(two.alpha_us == Approx(truth.alpha_us).epsilon(1e-6));
  CHECK(two.message_us == 9.0);
}

TEST_CASE("profile: no schedule measured leaves the fallback link", "[comm][profile]") {
  ProfileSection s;
  s.key = ProfileKey{2, 1, 2, true, false};
  s.candidates = {Candidate::Mailbox};
  s.rows.push_back({8, {0.3}});
  algo::LinkModel fallback;
  fallback.alpha_us = 7;
  CHECK(fit_link(s, fallback).alpha_us == 7.0);
}
