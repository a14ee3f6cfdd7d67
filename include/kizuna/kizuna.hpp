// kizuna/kizuna.hpp: the whole C++ API in one include.
//
//   #include <kizuna/kizuna.hpp>
//   auto comm = kizuna::Communicator::from_env();
//   comm->all_reduce(grad.data(), grad.size(), kizuna::DataType::Float32,
//                    kizuna::ReduceOp::Avg).wait();
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/comm_options.hpp>
#include <kizuna/config.hpp>
#include <kizuna/error.hpp>
#include <kizuna/hash_store.hpp>
#include <kizuna/prefix_store.hpp>
#include <kizuna/store.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>
#include <kizuna/types.hpp>
#include <kizuna/work.hpp>
