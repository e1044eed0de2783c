#!/usr/bin/env bash
# What starting a process costs on this machine, before governed-exec does
# anything: the same empty program built with no libc, with static glibc,
# and with dynamic glibc, each spawned and reaped N times (posix_spawn +
# waitpid, medians of 5 rounds). Every row of scripts/bench.sh's fixed-cost
# table pays one or two of these per run (the runner or `timeout`, and
# /bin/true), so this is the part of those figures no runner can remove.
#
#   bash scripts/process-start.sh [N]      (default 500)
#
# Needs a C compiler (cc) with static glibc (Debian: libc6-dev). Also
# times one `cpuid` instruction: where the hypervisor traps it, glibc's
# start-up (which asks cpuid for every cache level) is most of the cost.
set -euo pipefail
n=${1:-500}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
cat > empty.c <<'C'
int main(void) { return 0; }
C
cat > nolibc.c <<'C'
void _start(void) { __asm__ volatile("mov $60, %eax; xor %edi, %edi; syscall"); }
C
cat > spawn.c <<'C'
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
extern char **environ;
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  int n = atoi(argv[1]);
  double r[5];
  for (int k = 0; k < 5; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
      pid_t p;
      char *a[] = {argv[2], 0};
      if (posix_spawn(&p, argv[2], 0, 0, a, environ)) return 1;
      int s;
      waitpid(p, &s, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r[k] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n / 1e3;
  }
  qsort(r, 5, sizeof r[0], cmp);
  printf("%7.1f us", r[2]);
  return 0;
}
C
cat > cpuid.c <<'C'
#include <cpuid.h>
#include <stdio.h>
#include <time.h>
int main(void) {
  unsigned a, b, c, d;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 2000; i++) __cpuid_count(4, i & 3, a, b, c, d);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.2f us", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 2000 / 1e3);
  return 0;
}
C
cc -O2 -static -nostdlib nolibc.c -o nolibc
cc -O2 -static empty.c -o static-glibc
cc -O2 empty.c -o dynamic-glibc
cc -O2 spawn.c -o spawn
cc -O2 cpuid.c -o cpuid
echo "process start (spawn + exit + reap), median of 5 rounds of $n:"
for p in nolibc static-glibc dynamic-glibc; do
  printf '  %-15s %s\n' "$p" "$(./spawn "$n" "./$p")"
done
printf '  %-15s %s\n' "/bin/true" "$(./spawn "$n" /bin/true)"
echo "one cpuid instruction: $(./cpuid)"
