/*
 * kizuna/kizuna.h: the C ABI, shaped like NCCL's.
 *
 * A kzComm_t is a communicator (see kizuna/comm.hpp). Every function returns
 * a kzResult_t; on failure kzGetLastError() returns a message naming the
 * rank, the collective and its sequence number, for the calling thread.
 *
 * Collectives take (sendbuff, recvbuff, count, datatype, [op,] [root,] comm,
 * stream) as in NCCL. With stream == NULL the buffers are host memory and the
 * call returns when the collective has finished on this rank. A non-NULL
 * stream (a cudaStream_t) is for device memory and needs a libkizuna built
 * with CUDA (kzResult_t kzInvalidArgument otherwise).
 *
 * Thread safety: calls on one communicator may come from several threads;
 * they execute in the order they arrive.
 */
#ifndef KIZUNA_H_
#define KIZUNA_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kzComm* kzComm_t;
typedef void* kzStream_t; /* a cudaStream_t, or NULL for host memory */

typedef enum {
  kzSuccess = 0,
  kzInvalidArgument = 1,
  kzTimeout = 2,
  kzPeerLost = 3,
  kzMismatch = 4,
  kzSystemError = 5,
  kzCudaError = 6,
  kzAborted = 7,
  kzInternalError = 8,
  kzNumResults = 9
} kzResult_t;

typedef enum {
  kzInt8 = 0, kzChar = 0,
  kzUint8 = 1,
  kzInt32 = 2, kzInt = 2,
  kzUint32 = 3,
  kzInt64 = 4,
  kzUint64 = 5,
  kzFloat16 = 6, kzHalf = 6,
  kzBfloat16 = 7,
  kzFloat32 = 8, kzFloat = 8,
  kzFloat64 = 9, kzDouble = 9,
  kzNumTypes = 10
} kzDataType_t;

typedef enum { kzSum = 0, kzProd = 1, kzMin = 2, kzMax = 3, kzAvg = 4, kzNumOps = 5 } kzRedOp_t;

#define KZ_SPLIT_NOCOLOR (-1)

/* major * 10000 + minor * 100 + patch */
kzResult_t kzGetVersion(int* version);

/* From RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or Open MPI's / Slurm's
 * variables, and KIZUNA_STORE); see docs/env.md. */
kzResult_t kzCommInitFromEnv(kzComm_t* comm);

/* `store` is "host:port": rank 0 starts a store server there (port 0 is not
 * allowed here, the others must know it) and every rank joins it. */
kzResult_t kzCommInitRank(kzComm_t* comm, int nranks, const char* store, int rank);

/* Both free the handle (NULL is a no-op for Destroy): calling either again,
 * or anything else with it, afterwards is an error of the caller's. Another
 * thread may be inside a call on it meanwhile: Abort makes that call fail
 * with kzAborted (Destroy lets it finish), and the communicator is released
 * once the last such call returns. */
kzResult_t kzCommDestroy(kzComm_t comm);
kzResult_t kzCommAbort(kzComm_t comm);
kzResult_t kzCommSplit(kzComm_t comm, int color, int key, kzComm_t* newcomm);
/* After a failure (kzPeerLost or kzAborted from a call): every surviving
 * rank calls it; *newcomm is a communicator of the survivors, ranks
 * renumbered in the old order (Communicator::shrink in kizuna/comm.hpp).
 * `comm` stays a valid handle of the failed communicator: destroy it. */
kzResult_t kzCommShrink(kzComm_t comm, kzComm_t* newcomm);
kzResult_t kzCommCount(const kzComm_t comm, int* count);
kzResult_t kzCommUserRank(const kzComm_t comm, int* rank);
/* kzSuccess while usable; otherwise the error that made it unusable. */
kzResult_t kzCommGetAsyncError(kzComm_t comm, kzResult_t* async_error);

const char* kzGetErrorString(kzResult_t result);
/* The message of this thread's last failed call (comm may be NULL). */
const char* kzGetLastError(kzComm_t comm);

kzResult_t kzAllReduce(const void* sendbuff, void* recvbuff, size_t count, kzDataType_t datatype,
                       kzRedOp_t op, kzComm_t comm, kzStream_t stream);
kzResult_t kzBroadcast(const void* sendbuff, void* recvbuff, size_t count, kzDataType_t datatype,
                       int root, kzComm_t comm, kzStream_t stream);
kzResult_t kzReduce(const void* sendbuff, void* recvbuff, size_t count, kzDataType_t datatype,
                    kzRedOp_t op, int root, kzComm_t comm, kzStream_t stream);
kzResult_t kzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                       kzDataType_t datatype, kzComm_t comm, kzStream_t stream);
kzResult_t kzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           kzDataType_t datatype, kzRedOp_t op, kzComm_t comm, kzStream_t stream);
/* Host sends and receives match in order between each pair of ranks and run
 * apart from the collectives (see Communicator::send in kizuna/comm.hpp);
 * kzRecv's peer may be KZ_ANY_SOURCE. Each returns once done, so a rank that
 * sends and receives at once posts them in a group (below). */
#define KZ_ANY_SOURCE (-1)
kzResult_t kzSend(const void* sendbuff, size_t count, kzDataType_t datatype, int peer,
                  kzComm_t comm, kzStream_t stream);
kzResult_t kzRecv(void* recvbuff, size_t count, kzDataType_t datatype, int peer, kzComm_t comm,
                  kzStream_t stream);
kzResult_t kzBarrier(kzComm_t comm, kzStream_t stream);
/* Group calls, as NCCL's: between kzGroupStart and kzGroupEnd, this thread's
 * host calls (stream NULL) return once posted instead of once done, and
 * kzGroupEnd waits for them all and returns the first failure (each call's
 * argument errors are returned by the call itself). Groups nest; the
 * outermost kzGroupEnd waits. Sends and receives never wait for each other,
 * so a group may post them in any order on every rank (NCCL's
 * batch_isend_irecv pattern). Calls on device streams are unaffected. */
kzResult_t kzGroupStart(void);
kzResult_t kzGroupEnd(void);

/* Symmetric memory (Communicator::allocate_symmetric; NCCL's ncclMemAlloc
 * with a symmetric window): collective over comm, every rank in the same
 * order with the same size. *ptr receives `size` zeroed, page-aligned bytes
 * that the other ranks of the node read directly when a kzAllReduce's
 * buffers lie in such memory on every rank (docs/symmetric-memory.md);
 * across nodes or over TCP, ordinary memory. kzMemFree releases it (any
 * time, also after kzCommDestroy; NULL is a no-op); a pointer that
 * kzMemAlloc did not return is kzInvalidArgument. */
kzResult_t kzMemAlloc(kzComm_t comm, void** ptr, size_t size);
kzResult_t kzMemFree(void* ptr);

#ifdef __cplusplus
}
#endif

#endif /* KIZUNA_H_ */
