/* consumer.c: the same program in C, through kizuna's C ABI (kizuna.h),
 * built with pkg-config:
 *   cc -std=c11 consumer.c $(pkg-config --cflags --libs kizuna) -o consumer-c
 * and run under a launcher:
 *   kizuna-run --nproc-per-node 3 -- ./consumer-c
 */
#include <kizuna/kizuna.h>

#include <stdio.h>
#include <stdlib.h>

#define COUNT (1 << 20)

int main(void) {
  kzComm_t comm;
  int rank, world;
  /* RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (kizuna-run sets them). */
  if (kzCommInitFromEnv(&comm) != kzSuccess) {
    fprintf(stderr, "consumer-c: %s\n", kzGetLastError(NULL));
    return 1;
  }
  kzCommUserRank(comm, &rank);
  kzCommCount(comm, &world);

  float* grad = malloc(COUNT * sizeof(float));
  if (grad == NULL) return 1;
  for (size_t i = 0; i < COUNT; ++i) grad[i] = (float)(rank + 1);
  /* In place; a NULL stream means host memory, and the call returns when
   * the all-reduce has finished on this rank. */
  if (kzAllReduce(grad, grad, COUNT, kzFloat32, kzSum, comm, NULL) != kzSuccess) {
    fprintf(stderr, "consumer-c: %s\n", kzGetLastError(comm));
    return 1;
  }

  const float expected = world * (world + 1) / 2.0f; /* 1 + 2 + ... + world */
  for (size_t i = 0; i < COUNT; ++i) {
    if (grad[i] != expected) {
      fprintf(stderr, "consumer-c: rank %d: element %zu is %g, expected %g\n", rank, i, grad[i], expected);
      return 1;
    }
  }
  int version; /* major * 10000 + minor * 100 + patch */
  kzGetVersion(&version);
  printf("consumer (C): rank %d of %d: kzAllReduce of %d floats gave %g, kizuna %d.%d.%d\n", rank, world, COUNT,
         expected, version / 10000, version / 100 % 100, version % 100);
  free(grad);
  kzCommDestroy(comm);
  return 0;
}
