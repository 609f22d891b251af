/* A disk slower to flush than this VM's: fsync and fdatasync each wait
 * TROUPE_FSYNC_DELAY_US microseconds (default 2000, a network-attached
 * cloud disk's order) before doing their work. Loaded into a server with
 * LD_PRELOAD to measure what its flushes cost where they are not free:
 *
 *   cc -shared -fPIC -O2 -o /tmp/slow_fsync.so tools/bench/slow_fsync.c -ldl
 *   LD_PRELOAD=/tmp/slow_fsync.so TROUPE_FSYNC_DELAY_US=2000 build/bin/troupe-serve --config ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

static long delay_ns(void) {
  static atomic_long ns = -1;
  long v = atomic_load(&ns);
  if (v < 0) {
    const char* s = getenv("TROUPE_FSYNC_DELAY_US");
    v = (s != NULL ? atol(s) : 2000) * 1000L;
    atomic_store(&ns, v);
  }
  return v;
}

static void wait_for_the_disk(void) {
  const long ns = delay_ns();
  struct timespec t = {ns / 1000000000L, ns % 1000000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

static atomic_long flushes;

/* Printed at exit, so that a run can say how many flushes it made. */
__attribute__((destructor)) static void report(void) {
  const char* path = getenv("TROUPE_FSYNC_COUNT_FILE");
  if (path == NULL)
    return;
  FILE* f = fopen(path, "w");
  if (f != NULL) {
    fprintf(f, "%ld\n", atomic_load(&flushes));
    fclose(f);
  }
}

int fsync(int fd) {
  static int (*real)(int);
  if (real == NULL)
    real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  atomic_fetch_add(&flushes, 1);
  wait_for_the_disk();
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (real == NULL)
    real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  atomic_fetch_add(&flushes, 1);
  wait_for_the_disk();
  return real(fd);
}
