#include <catch2/catch.hpp>

#include <string>

#include "core/check.hpp"

using namespace kizuna;

namespace {
Error catch_error(void (*fn)()) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorCode::Internal, "no exception");
}
}  // namespace

TEST_CASE("KIZUNA_CHECK_EQ names file, line, expression and both values", "[check]") {
  const Error e = catch_error([] {
    const int rank = 3;
    const int expected = 4;
    KIZUNA_CHECK_EQ(rank, expected, "while matching peers");
  });
  const std::string what = e.what();
  CHECK(e.code() == ErrorCode::Internal);
  CHECK(what.find("test_check.cpp:") != std::string::npos);
  CHECK(what.find("rank == expected") != std::string::npos);
  CHECK(what.find("(3 vs 4)") != std::string::npos);
  CHECK(what.find("while matching peers") != std::string::npos);
}

TEST_CASE("KIZUNA_CHECK_ARG is an InvalidArgument with the message only", "[check]") {
  const Error e = catch_error([] { KIZUNA_CHECK_ARG(1 > 2, "root ", 7, " out of range"); });
  CHECK(e.code() == ErrorCode::InvalidArgument);
  CHECK(std::string(e.what()) == "root 7 out of range");
}

TEST_CASE("passing checks evaluate nothing else", "[check]") {
  int evaluated = 0;
  auto side_effect = [&] { return ++evaluated; };
  KIZUNA_CHECK(true, side_effect());
  KIZUNA_CHECK_LE(1, 2, side_effect());
  CHECK(evaluated == 0);
  CHECK(name(ErrorCode::PeerLost) == "PeerLost");
}
