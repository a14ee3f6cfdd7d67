// comm/store_barrier.hpp: a barrier over the store that gives up instead
// of failing, for teardown.
//
// At a communicator's end some things may be done only once every rank
// has done its part (a GPU's exported memory may be freed only after every
// peer has closed its mapping of it). A rank may never come (it died, or
// ends much later), and a destructor must neither hang nor throw, so the
// barrier has a deadline and answers false past it, or when the store
// fails (its host may be gone): the caller then leaves the thing for the
// process's end, which is always safe. The deadline counts once the store
// has taken this rank's word; a store that does not answer at all holds
// the rank for the store's own timeout (KIZUNA_STORE_TIMEOUT), as every
// store call does.
#pragma once

#include <kizuna/store.hpp>

#include <chrono>
#include <string>

namespace kizuna::comm {

// Rank `rank` of `world` sets "<key>/<rank>", then waits at most `wait`
// (and the store's grace for its reply) for every other rank's. True when
// all came; false otherwise. Never throws.
bool store_barrier_within(Store& store, const std::string& key, int rank, int world,
                          std::chrono::milliseconds wait) noexcept;

}  // namespace kizuna::comm
