#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the ledger tests.
#
#   scripts/pg-test-cluster.sh start DIR   # prints `export …` lines for the tests
#   scripts/pg-test-cluster.sh stop DIR
#
# Finds the server binaries (/usr/lib/postgresql/*/bin, /usr/local/bin, PATH),
# installing Debian's `postgresql` package when none are there and we are
# root with apt-get. initdb runs into DIR as the `postgres` user when we are
# root (the server refuses to run as root), with SCRAM password auth on
# 127.0.0.1 and a random password, on a free port. Exit 1 (and say why on
# stderr) when no cluster can be had; the tests then SKIP loudly.
#
# With openssl, the server also speaks TLS, with a certificate for the
# address 127.0.0.1 only (no DNS name) from a throwaway CA: the ledger tests
# check that verify-full refuses the name `localhost`, that a root the
# server's chain does not lead to is refused with its cause, and that the
# right root and address connect (GOVERNED_EXEC_TEST_PG_CA,
# GOVERNED_EXEC_TEST_PG_OTHER_CA).
set -euo pipefail

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) /usr/local/bin /usr/local/pgsql/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

case "$cmd" in
start)
  if ! bin=$(find_bin); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "pg-test-cluster: installing Debian's postgresql package" >&2
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    fi
    bin=$(find_bin) || { echo "pg-test-cluster: no PostgreSQL server binaries (initdb, pg_ctl) found" >&2; exit 1; }
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin postgres
  fi
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  chmod 700 "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  password="ge-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
  printf '%s\n' "$password" > "$dir/pwfile"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/pwfile"
  as_owner "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
    --auth-local=scram-sha-256 --auth-host=scram-sha-256 -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/pwfile"
  tls_opts=""
  if command -v openssl >/dev/null; then
    tls="$dir/tls"; mkdir -p "$tls"
    ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    for ca in ca other-ca; do
      openssl req -x509 $ec -keyout "$tls/$ca.key" -out "$tls/$ca.pem" -days 3 \
        -subj "/CN=governed-exec test $ca" 2>/dev/null
    done
    openssl req $ec -keyout "$tls/server.key" -out "$tls/server.csr" \
      -subj "/CN=governed-exec test server" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$tls/ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
      -CAcreateserial -days 3 -extfile "$tls/ext" -out "$tls/server.pem" 2>/dev/null
    chmod 600 "$tls/server.key"
    [ "$(id -u)" = 0 ] && chown postgres: "$tls/server.key" "$tls/server.pem"
    chmod 755 "$tls"
    tls_opts="-c ssl=on -c ssl_cert_file=$tls/server.pem -c ssl_key_file=$tls/server.key"
  fi
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 $tls_opts" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  cat <<ENV
export GOVERNED_EXEC_TEST_PG_BIN=$bin
export GOVERNED_EXEC_TEST_PG_PORT=$port
export GOVERNED_EXEC_TEST_PG_DIR=$dir
export PGHOST=127.0.0.1
export PGPORT=$port
export PGUSER=postgres
export PGPASSWORD=$password
ENV
  if [ -n "$tls_opts" ]; then
    echo "export GOVERNED_EXEC_TEST_PG_CA=$tls/ca.pem"
    echo "export GOVERNED_EXEC_TEST_PG_OTHER_CA=$tls/other-ca.pem"
  fi
  ;;
stop)
  bin=$(find_bin) || exit 0
  if [ -d "$dir/data" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
