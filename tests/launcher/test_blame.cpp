// kizuna-run's last line names the rank whose failure ended the job
// (tools/run/blame.hpp), whatever order the workers were reaped in.
#include <catch2/catch.hpp>

#include "run/blame.hpp"

using namespace kizuna::run;

namespace {

Failed failed(int rank, const std::string& how, std::vector<std::string> lines = {},
              std::map<std::string, std::string> status = {}) {
  return Failed{rank, how, std::move(lines), std::move(status)};
}

}  // namespace

TEST_CASE("blame: a rank killed first is named even when a survivor was reaped before it", "[launcher][blame]") {
  const std::vector<Failed> reaped = {
      failed(0, "exited with code 3", {"rank 0: PeerLost: lost rank 2 of kizuna/comm0: connection closed"}),
      failed(2, "was killed by SIGKILL (signal 9: Killed)", {"rank 2 sleeping"}),
      failed(1, "exited with code 3", {"kizuna[r1] E lost rank 2 of kizuna/comm0"}),
  };
  const Blame b = blame(reaped);
  CHECK(b.rank == 2);
  CHECK(b.failed);
  CHECK(b.then == std::vector<int>{0, 1});
  CHECK(describe(b, "") == "rank 2 was killed by SIGKILL (signal 9: Killed); ranks 0 and 1 then failed");
}

TEST_CASE("blame: a rank that stopped answering is named from the others' status lines", "[launcher][blame]") {
  // Ring: rank 0 waits for rank 2, rank 1 for rank 0; rank 2 never failed.
  const std::vector<Failed> reaped = {
      failed(1, "exited with code 6", {"Timeout"}, {{"waiting_for", "0"}}),
      failed(0, "exited with code 6", {"Timeout"}, {{"waiting_for", "2"}}),
  };
  const Blame b = blame(reaped);
  CHECK(b.rank == 2);
  CHECK_FALSE(b.failed);
  CHECK(describe(b, " on node 1") == "rank 2 on node 1 stopped answering; ranks 0 and 1 then failed");
}

TEST_CASE("blame: one failure that names nobody is the cause, as reaped", "[launcher][blame]") {
  const Blame b = blame({failed(1, "exited with code 3", {"rank 1 exiting with code 3"})});
  CHECK(b.rank == 1);
  CHECK(describe(b, "") == "rank 1 exited with code 3");
}
