/* A plain C program (compiled as C) using only kizuna.h: one rank of a
 * multi-process test. Every rank sums (rank + 1) * i for i in 0..n-1 and
 * checks the closed-form result, then broadcasts, gathers and splits. */
#include <kizuna/kizuna.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                 \
  do {                                                                              \
    kzResult_t r_ = (call);                                                         \
    if (r_ != kzSuccess) {                                                          \
      printf("%s failed: %s: %s\n", #call, kzGetErrorString(r_), kzGetLastError(NULL)); \
      return 10 + r_;                                                               \
    }                                                                               \
  } while (0)

int main(void) {
  kzComm_t comm;
  int rank, size, version, i, wrong = 0;
  const size_t n = 100003;
  double* data;
  double* symmetric;
  int* gathered;
  kzComm_t half;
  kzResult_t async_error;

  CHECK(kzGetVersion(&version));
  CHECK(kzCommInitFromEnv(&comm));
  CHECK(kzCommUserRank(comm, &rank));
  CHECK(kzCommCount(comm, &size));

  data = malloc(n * sizeof(double));
  for (i = 0; i < (int)n; ++i) data[i] = (double)(rank + 1) * i;
  CHECK(kzAllReduce(data, data, n, kzFloat64, kzSum, comm, NULL));
  for (i = 0; i < (int)n; ++i)
    if (data[i] != (double)size * (size + 1) / 2 * i) ++wrong;

  data[0] = rank == 1 % size ? 42.0 : 0.0;
  CHECK(kzBroadcast(data, data, 1, kzFloat64, 1 % size, comm, NULL));
  if (data[0] != 42.0) ++wrong;

  gathered = malloc(size * sizeof(int));
  CHECK(kzAllGather(&rank, gathered, 1, kzInt32, comm, NULL));
  for (i = 0; i < size; ++i)
    if (gathered[i] != i) ++wrong;

  /* the same sum on symmetric memory, freed after the communicator */
  CHECK(kzMemAlloc(comm, (void**)&symmetric, n * sizeof(double)));
  for (i = 0; i < (int)n; ++i) symmetric[i] = (double)(rank + 1) * i;
  CHECK(kzAllReduce(symmetric, symmetric, n, kzFloat64, kzSum, comm, NULL));
  for (i = 0; i < (int)n; ++i)
    if (symmetric[i] != (double)size * (size + 1) / 2 * i) ++wrong;
  if (kzMemFree(data) != kzInvalidArgument) ++wrong;

  CHECK(kzCommSplit(comm, rank % 2, rank, &half));
  CHECK(kzBarrier(half, NULL));
  CHECK(kzCommDestroy(half));

  /* a wrong call is an error with a message, not a crash */
  if (kzAllReduce(NULL, data, 10, kzFloat32, kzSum, comm, NULL) != kzInvalidArgument) ++wrong;
  CHECK(kzCommGetAsyncError(comm, &async_error));
  if (async_error != kzSuccess) ++wrong;

  CHECK(kzCommDestroy(comm));
  CHECK(kzMemFree(symmetric));
  CHECK(kzMemFree(NULL));
  printf("C rank %d of %d (kizuna %d): %s\n", rank, size, version, wrong ? "WRONG" : "ok");
  free(data);
  free(gathered);
  return wrong ? 1 : 0;
}
