// tests/support/every_rank_failed.hpp: checks that every rank's call ended
// with the same error code, and a message a Catch matcher accepts; each
// failure names the rank and its message.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include <kizuna/error.hpp>

namespace kizuna::test {

template <typename Matcher>
void check_every_rank_failed(const std::vector<Error>& errors, ErrorCode code, const Matcher& matcher) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r].what());
    CHECK(errors[r].code() == code);
    CHECK_THAT(errors[r].what(), matcher);
  }
}

inline void check_every_rank_failed(const std::vector<Error>& errors, ErrorCode code) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r].what());
    CHECK(errors[r].code() == code);
  }
}

}  // namespace kizuna::test
