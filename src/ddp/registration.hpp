// ddp/registration.hpp: the Reducer's check that every rank registered the
// same parameters and options.
//
// One all_gather of a 24-byte digest per rank (parameter count, a hash of
// the parameter list, a hash of the options) settles the common case. When
// digests differ, every rank sees the same gathered bytes and so takes the
// same path: a second all_gather of per-parameter hashes finds the first
// differing parameter, a third gathers each rank's description of it, and
// every rank throws the same Mismatch naming it and grouping the ranks by
// what they registered. Collective; blocks until done.
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/parameter.hpp>

#include <string>
#include <vector>

namespace kizuna::ddp {

// "'fc1.weight' (float32, 4096 elements at byte 0, shape [64, 64])"
std::string describe(const Parameter& p);

// "ranks 0, 2" or "rank 1"
std::string describe_ranks(const std::vector<int>& ranks);

void verify_registration(Communicator& comm, const std::vector<Parameter>& params,
                         const std::string& options_description);

}  // namespace kizuna::ddp
