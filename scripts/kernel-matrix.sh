#!/usr/bin/env bash
# The kernel matrix: the project's own tests all run on one kernel (the
# machine's), but users run governed-exec on others. This boots Debian's
# own kernels under QEMU with a busybox initramfs that holds the static
# binary (scripts/build-static.sh), runs a scenario suite in each
# configuration, and reads each scenario's result back from the serial
# console as `MATRIX <config> <scenario> PASS|FAIL <detail>`. It prints a
# results table and exits non-zero on any FAIL (a configuration that does
# not boot or does not finish is a FAIL too).
#
# Configurations:
#   cgroup-v2      Linux 6.1, cgroup v2 only: memory limit reaped by the
#                  memory cgroup, fork bomb stopped by the pids cgroup, a
#                  setsid daemon killed and counted.
#   no-userns      Linux 6.1, user.max_user_namespaces=0, runner uid 1000:
#                  --no-network by the seccomp socket filter, --pid-namespace
#                  refused.
#   landlock-6.1   Linux 6.1's Landlock ABI: the write scope holds and the
#                  receipt names that ABI; signal scoping (ABI 6) is not
#                  claimed, the runner's reachability by signals is stated.
#   newer          the newest other linux-image Debian offers (6.12 on
#                  bookworm), cgroup v2 only: a write-scoped run verifies, memory
#                  limit reaped, Landlock ABI and signal scoping. Skipped
#                  when no such kernel is installed.
# Each configuration has a scenario that checks the effect itself (not only
# the receipt's word), so a mechanism that silently degraded FAILs.
#
# As root with apt-get, installs what is missing from Debian's packages:
# qemu-system-x86, linux-image-amd64, the newest linux-image-X.Y-amd64
# that `apt-cache search` offers, busybox-static. Uses /dev/kvm when it is
# usable, else QEMU's software emulation.
#
# Environment: GOVERNED_EXEC_BIN (a static binary; default: build one),
# MATRIX_CONFIGS (space-separated subset of the configuration names),
# MATRIX_TIMEOUT (seconds per boot; default 90: a boot and its scenarios take
# about 20 s under software emulation, and four hung boots stay near the
# matrix's 6-minute budget).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

# --- what it needs ---------------------------------------------------------
newest_kernel_pkg() {
  # linux-image-6.12-amd64 and the like: the meta-packages of newer series.
  apt-cache search --names-only '^linux-image-[0-9]+\.[0-9]+-amd64$' 2>/dev/null |
    awk '{print $1}' | sort -V | tail -1
}
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  command -v file >/dev/null || missing+=(file)
  file /bin/busybox 2>/dev/null | grep -q 'statically linked' || missing+=(busybox-static)
  ls /boot/vmlinuz-6.1.* >/dev/null 2>&1 || missing+=(linux-image-amd64)
  updated=no
  if [ ${#missing[@]} -gt 0 ] || ! ls /boot/vmlinuz-* 2>/dev/null | grep -vq '/vmlinuz-6\.1\.'; then
    apt-get update -qq
    updated=yes
  fi
  if [ "$updated" = yes ] && ! ls /boot/vmlinuz-* 2>/dev/null | grep -vq '/vmlinuz-6\.1\.'; then
    newer=$(newest_kernel_pkg)
    [ -n "$newer" ] && missing+=("$newer")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "kernel-matrix: installing ${missing[*]}" >&2
    # INITRD=No: the kernels boot the matrix's own initramfs, not one of the
    # host's (initramfs-tools' kernel hook skips generating it).
    DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
fi
command -v qemu-system-x86_64 >/dev/null || { echo "kernel-matrix: qemu-system-x86_64 missing (Debian: qemu-system-x86)" >&2; exit 1; }
busybox=/bin/busybox
file "$busybox" 2>/dev/null | grep -q 'statically linked' || { echo "kernel-matrix: no static $busybox (Debian: busybox-static)" >&2; exit 1; }
bin=${GOVERNED_EXEC_BIN:-$(bash "$repo/scripts/build-static.sh")}
file "$bin" | grep -Eq 'static-pie linked|statically linked' || { echo "kernel-matrix: $bin is not a static binary" >&2; exit 1; }

# The kernels: Linux 6.1 (bookworm's linux-image-amd64) and the newest other.
kernel_61=$(ls /boot/vmlinuz-6.1.* 2>/dev/null | sort -V | tail -1 || true)
kernel_new=$(ls /boot/vmlinuz-* 2>/dev/null | grep -v '/vmlinuz-6\.1\.' | sort -V | tail -1 || true)
[ -n "$kernel_61" ] || { echo "kernel-matrix: no /boot/vmlinuz-6.1.* (Debian: linux-image-amd64)" >&2; exit 1; }

# The Landlock ABI each kernel series offers (landlock_create_ruleset's
# LANDLOCK_CREATE_RULESET_VERSION), checked against what the receipt says.
landlock_abi_of() {
  local v=${1#/boot/vmlinuz-}
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%[!0-9]*}
  local n=$((major * 1000 + minor))
  if [ $n -ge 6015 ]; then echo 7
  elif [ $n -ge 6012 ]; then echo 6
  elif [ $n -ge 6010 ]; then echo 5
  elif [ $n -ge 6007 ]; then echo 4
  elif [ $n -ge 6002 ]; then echo 3
  elif [ $n -ge 5019 ]; then echo 2
  elif [ $n -ge 5013 ]; then echo 1
  else echo 0
  fi
}

work=$(mktemp -d "${TMPDIR:-/tmp}/kernel-matrix.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the initramfs ---------------------------------------------------------
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,etc,matrix}
cp "$busybox" "$root/bin/busybox"
cp "$bin" "$root/bin/governed-exec"
# Root and the unprivileged runner of the no-userns configuration (busybox
# su needs a passwd entry; governed-exec itself reads no NSS database).
printf 'root:x:0:0:root:/root:/bin/sh\nrunner:x:1000:1000:runner:/home/runner:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nrunner:x:1000:\n' >"$root/etc/group"

cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /usr/bin /sbin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm /dev/pts /home/runner
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# As systemd does: the controllers the run's group needs, for the root's
# children.
echo "+memory +pids" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
echo 1 >/proc/sys/kernel/printk
ip link set lo up
exec sh /matrix/suite.sh
EOF
chmod 0755 "$root/init"

cat >"$root/matrix/suite.sh" <<'EOF'
# The scenario suite, in the VM (busybox sh). Reads matrix.config= and
# matrix.landlock_abi= from the kernel command line.
for a in $(cat /proc/cmdline); do
  case "$a" in
    matrix.config=*) CONFIG=${a#*=} ;;
    matrix.landlock_abi=*) ABI=${a#*=} ;;
  esac
done
G=/bin/governed-exec
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

report() { echo "MATRIX $CONFIG $1 $2 $3"; }

# setup NAME: a fresh goal, approver key and workspace in $W.
setup() {
  NAME=$1
  W=$(mktemp -d /tmp/sc.XXXXXX)
  mkdir "$W/ws"
  printf '{"schema":"governed-exec/goal/v1","id":"matrix","revision":1,"criteria":[{"kind":"exit_code","equals":0}]}' >"$W/goal.json"
  $G keygen --out "$W/ap" >/dev/null 2>&1
  FAILS=""
}
# approve LEASE-FLAGS -- CMD...: one lease (LEASE-FLAGS is one word list).
approve() {
  flags=$1; shift 2
  # shellcheck disable=SC2086
  $G approve --goal "$W/goal.json" --workspace "$W/ws" --manifest "$W/m.json" \
    --key "$W/ap.key" --approver matrix --ttl 10m $flags -- "$@" >"$W/approve.out" 2>&1 \
    || fail "approve exited $?: $(tail -c 300 "$W/approve.out" | tr '\n' ' ')"
}
# run CMD...: the run, its exit code in RC, the decoded receipt in $W/r.txt.
run() {
  RC=0
  (cd "$W/ws" && $G run --goal "$W/goal.json" --manifest "$W/m.json" --trust "$W/ap.pub" \
    --state-dir "$W/state" --receipt "$W/r.json" --quiet -- "$@") >"$W/run.out" 2>&1 || RC=$?
  $G receipt show "$W/r.json" --format json >"$W/r.txt" 2>&1 || fail "no receipt (run exited $RC: $(tail -c 300 "$W/run.out" | tr '\n' ' '))"
}
fail() { FAILS="$FAILS; $*"; }
# has PATTERN / hasnt PATTERN: a basic regular expression on the receipt.
has() { grep -q -- "$1" "$W/r.txt" || fail "receipt lacks $1"; }
hasnt() { ! grep -q -- "$1" "$W/r.txt" || fail "receipt has $1"; }
field() { grep -m1 -- "\"$1\":" "$W/r.txt" | sed 's/^ *//; s/,$//'; }
done_() {
  if [ -z "$FAILS" ]; then report "$NAME" PASS "$1"
  else report "$NAME" FAIL "${FAILS#; } [$1]"
  fi
}

# A program that touches far more than 64 MiB of anonymous memory: awk
# doubling a string up to 256 MiB. Unlimited, it prints `survived`.
MEMHOG='BEGIN { s = "x"; while (length(s) < 268435456) s = s s; print "survived" }'

memory_reaped() {
  setup memory-reaped
  approve "--memory 64MiB" -- /bin/busybox awk "$MEMHOG"
  run /bin/busybox awk "$MEMHOG"
  [ "$RC" = 121 ] || fail "run exited $RC, not 121"
  has '"class": "memory_limit_reaped"'
  has '"memory_limit": "memory_cgroup_v2"'
  has '"mechanism": "cgroup_v2"'
  hasnt '"text": "survived'
  done_ "$(field class) $(field memory_limit) $(field oom_kills) rc=$RC"
}

fork_limit() {
  setup fork-limit
  cmd='n=0; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do /bin/busybox sleep 5 & n=$((n+1)); done; echo forked=$n'
  approve "--max-processes 8" -- /bin/busybox sh -c "$cmd"
  run /bin/busybox sh -c "$cmd"
  has '"process_limit": "pids_cgroup_v2"'
  has '"mechanism": "cgroup_v2"'
  hasnt 'forked=16'
  # The shell's own word on stderr (the argv itself spells "forked").
  has "can't fork"
  done_ "$(field process_limit) $(field peak_processes) rc=$RC"
}

setsid_daemon() {
  setup setsid-daemon
  cmd='/bin/busybox setsid /bin/busybox sleep 307 & echo started'
  approve "" -- /bin/busybox sh -c "$cmd"
  run /bin/busybox sh -c "$cmd"
  [ "$RC" = 0 ] || fail "run exited $RC"
  has '"state": "gone"'
  has '"leftover_processes_killed": [1-9]'
  has '"mechanism": "cgroup_v2"'
  # The daemon itself, looked for in the VM: gone, not merely counted.
  if ps -o pid,args | grep -v grep | grep -q 'sleep 307'; then fail "the daemon still runs"; fi
  done_ "$(field state) $(field leftover_processes_killed); the daemon is gone from ps"
}

userns_off() {
  setup userns-off
  # The premise: this runner cannot make a user namespace.
  if unshare -U true 2>/dev/null; then fail "unshare -U works as uid $(id -u): the configuration is not what it claims"; fi
  [ "$(id -u)" = 1000 ] || fail "runs as uid $(id -u), not 1000"
  done_ "uid=$(id -u) max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces)"
}

no_network_seccomp() {
  setup no-network-seccomp
  approve "--no-network" -- /bin/busybox nc 127.0.0.1 9
  run /bin/busybox nc 127.0.0.1 9
  has '"network_mechanism": "seccomp_socket_families"'
  has '"network_namespace": false'
  # The effect: socket(AF_INET) itself refused, not a refused connection
  # to loopback (which is what an unfiltered child gets).
  has 'Address family not supported'
  hasnt 'Connection refused'
  done_ "$(field network_mechanism) rc=$RC"
}

pid_namespace_refused() {
  setup pid-namespace-refused
  approve "--pid-namespace" -- /bin/busybox true
  run /bin/busybox true
  [ "$RC" != 0 ] || fail "run exited 0"
  has '"reason": "isolation_unavailable"'
  hasnt '"class": "exited"'
  done_ "$(field class) $(field reason) rc=$RC"
}

landlock_scope() {
  setup landlock-scope
  rm -f /matrix-outside
  cmd='echo in >inside.txt; if echo out >/matrix-outside 2>/dev/null; then echo WROTE-OUTSIDE; else echo denied-outside; fi'
  approve "--fs-write-scope" -- /bin/busybox sh -c "$cmd"
  run /bin/busybox sh -c "$cmd"
  [ "$RC" = 0 ] || fail "run exited $RC"
  has "\"landlock_abi\": $ABI,"
  has '"text": "denied-outside'
  [ -e /matrix-outside ] && fail "the child wrote /matrix-outside outside its write scope"
  [ -f "$W/ws/inside.txt" ] || fail "the child could not write its workspace"
  # Signal scoping needs Landlock ABI 6: below it the receipt must not claim
  # it, and must state whether the child can signal the runner.
  sig=$(grep -A3 '"channel": "runner_signals"' "$W/r.txt" | tr -d '\n')
  if [ "$ABI" -ge 6 ]; then
    echo "$sig" | grep -q "\"reachable\": false.*Landlock (ABI $ABI) scopes" || fail "runner_signals: $sig"
  else
    echo "$sig" | grep -q 'Landlock' && fail "runner_signals claims Landlock below ABI 6: $sig"
    echo "$sig" | grep -q '"reachable": true.*may signal the runner' || fail "runner_signals not stated: $sig"
  fi
  done_ "$(field landlock_abi) expected $ABI (kernel $(uname -r)); $(echo "$sig" | sed 's/.*"reachable": \([a-z]*\).*/signals reachable=\1/')"
}

# The quick start's shape: a write-scoped run (the runner key out of the
# child's reach, so the receipt proves something), then verify.
run_verifies() {
  setup run-verifies
  approve "--fs-write-scope" -- /bin/busybox echo hello
  run /bin/busybox echo hello
  [ "$RC" = 0 ] || fail "run exited $RC"
  has '"class": "exited"'
  has '"text": "hello\\n"'
  $G verify --goal "$W/goal.json" --receipt "$W/r.json" --trust "$W/state/runner.pub" \
    --state-dir "$W/state" >"$W/verify.out" 2>&1 || fail "verify exited $?: $(tail -c 300 "$W/verify.out" | tr '\n' ' ')"
  done_ "$(grep -o '^[A-Z_]*' "$W/verify.out" | head -1) on $(uname -r)"
}

case "${1:-}" in
  as-runner) shift; for s in "$@"; do "$s"; done; exit 0 ;;
esac

case "$CONFIG" in
  cgroup-v2)
    memory_reaped; fork_limit; setsid_daemon ;;
  no-userns)
    echo 0 >/proc/sys/user/max_user_namespaces
    chmod 0755 /home/runner; chown 1000:1000 /home/runner
    su -s /bin/sh runner -c "HOME=/home/runner sh /matrix/suite.sh as-runner userns_off no_network_seccomp pid_namespace_refused" ;;
  landlock-*)
    landlock_scope ;;
  newer)
    run_verifies; memory_reaped; landlock_scope ;;
  *) report "${CONFIG:-?}" FAIL "unknown configuration" ;;
esac
echo "MATRIX $CONFIG - END"
sync
poweroff -f
EOF

(cd "$root" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz")

# --- the boots -------------------------------------------------------------
# KVM where it works: a nested one (a VM's /dev/kvm) may refuse the host
# CPU's MSRs or hang, so a bare boot of the 6.1 kernel must reach its
# "no root" panic first; else QEMU's software emulation (TCG), which boots
# a Debian kernel in seconds too.
kvm_works() {
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
  timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults -display none \
    -no-reboot -serial stdio -kernel "$kernel_61" -append "console=ttyS0 panic=-1" \
    </dev/null 2>&1 | grep -q 'Kernel panic'
}
if kvm_works; then
  accel=(-accel kvm -cpu host)
  how=kvm
  timeout_s=${MATRIX_TIMEOUT:-90}
else
  accel=(-accel tcg -cpu max)
  how="tcg ($([ -e /dev/kvm ] && echo "/dev/kvm did not boot the 6.1 kernel" || echo "no /dev/kvm"))"
  timeout_s=${MATRIX_TIMEOUT:-90}
fi
configs=${MATRIX_CONFIGS:-cgroup-v2 no-userns landlock-6.1 newer}
v2only="cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1"
echo "kernel-matrix: accel $how; 6.1 kernel $kernel_61; newer kernel ${kernel_new:-none}" >&2

results=$work/results
: >"$results"
boot() { # CONFIG KERNEL EXTRA-CMDLINE
  local cfg=$1 kernel=$2 extra=$3 log=$work/$1.log start=$SECONDS
  local cmdline="console=ttyS0 rdinit=/init panic=-1 loglevel=1 matrix.config=$cfg matrix.landlock_abi=$(landlock_abi_of "$kernel") $extra"
  echo "kernel-matrix: booting $cfg: $(basename "$kernel") $extra" >&2
  timeout "$timeout_s" qemu-system-x86_64 "${accel[@]}" -m 1024 -smp 2 -nodefaults -display none \
    -no-reboot -serial "file:$log" -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "$cmdline" </dev/null >"$work/$cfg.qemu" 2>&1 || true
  tr -d '\r' <"$log" | grep '^MATRIX ' | grep -v ' - END$' >>"$results" || true
  if ! tr -d '\r' <"$log" | grep -q "^MATRIX $cfg - END"; then
    local tail_
    tail_=$( (cat "$work/$cfg.qemu"; tr -d '\r' <"$log") | tail -5 | tr '\n' ' ' | cut -c1-400)
    echo "MATRIX $cfg boot FAIL did not finish within ${timeout_s}s: $tail_" >>"$results"
  fi
  echo "kernel-matrix: $cfg done in $((SECONDS - start))s" >&2
}
for cfg in $configs; do
  case "$cfg" in
    cgroup-v2) boot "$cfg" "$kernel_61" "$v2only" ;;
    no-userns) boot "$cfg" "$kernel_61" "$v2only" ;;
    landlock-6.1) boot "$cfg" "$kernel_61" "" ;;
    newer)
      if [ -n "$kernel_new" ]; then boot "$cfg" "$kernel_new" "$v2only"
      else echo "MATRIX newer - SKIP no linux-image newer than 6.1 installed" >>"$results"; fi ;;
    *) echo "MATRIX $cfg - FAIL unknown configuration" >>"$results" ;;
  esac
done

# --- the table -------------------------------------------------------------
echo
printf '%-14s %-24s %-5s %s\n' CONFIG SCENARIO RESULT DETAIL
while read -r _ cfg scen res detail; do
  printf '%-14s %-24s %-5s %s\n' "$cfg" "$scen" "$res" "$detail"
done <"$results"
pass=$(awk '$4 == "PASS"' "$results" | wc -l)
failed=$(awk '$4 != "PASS" && $4 != "SKIP"' "$results" | wc -l)
echo
echo "kernel-matrix: $pass passed, $failed failed"
[ "$failed" = 0 ] && [ "$pass" -gt 0 ]
