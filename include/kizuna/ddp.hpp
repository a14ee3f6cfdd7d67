// kizuna/ddp.hpp: the data-parallel training layer, in one include.
//
//   Reducer             gradient buckets all-reduced while backward runs  reducer.hpp
//   ReducerOptions      bucket caps, compression, averaging, unused params reducer_options.hpp
//   Parameter           a named view into the flat parameter/gradient buffers parameter.hpp
//   BucketSpec          bucket assignment, a pure function                  bucket_spec.hpp
//   Bucket, CommHook    what a communication hook sees and implements       bucket.hpp, comm_hook.hpp
//   DistributedSampler  each rank's share of an epoch                       distributed_sampler.hpp
//   Checkpoint          named tensors saved once, loaded everywhere         checkpoint.hpp
//
// Everything here is built on the public communicator API (kizuna/comm.hpp)
// alone.
#pragma once

#include <kizuna/bucket.hpp>
#include <kizuna/bucket_spec.hpp>
#include <kizuna/checkpoint.hpp>
#include <kizuna/comm_hook.hpp>
#include <kizuna/distributed_sampler.hpp>
#include <kizuna/parameter.hpp>
#include <kizuna/reducer.hpp>
#include <kizuna/reducer_options.hpp>
