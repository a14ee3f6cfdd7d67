// run/blame.hpp: which rank's failure ended the job.
//
// When one rank dies, the others fail too, a moment later: PeerLost ("lost
// rank 2 ...") or Timeout (their status line says waiting_for=2). The rank
// kizuna-run reaps first need not be the one that started it, and a rank
// that stopped answering may not have failed at all. blame() reads every
// failed rank's last lines and status line for the ranks they name: a
// failure that names another rank is a consequence; the cause is the first
// failure (in the order reaped) that names none, or else the rank the
// failures name most that is no consequence itself (one that stopped).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kizuna::run {

struct Failed {
  int rank = -1;
  std::string how;                   // "exited with code 3", "was killed by SIGKILL (...)"
  std::vector<std::string> lines;    // its last lines
  std::map<std::string, std::string> status;  // its [kizuna-status] fields, if any
};

struct Blame {
  int rank = -1;          // the rank whose failure ended the job
  bool failed = false;    // it is one of the failures (else it stopped answering)
  std::string how;        // its failure, when it is one
  std::vector<int> then;  // the other ranks that failed
};

// `failures` in the order they were reaped; not empty.
Blame blame(const std::vector<Failed>& failures);

// The line kizuna-run ends a failed job with, without "job failed: ".
// `where` is " on node K" with several nodes, else "".
std::string describe(const Blame& b, const std::string& where);

}  // namespace kizuna::run
