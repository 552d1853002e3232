#!/usr/bin/env bash
# Start a PostgreSQL server for the MLflow tracking server tests (the cluster-scale deployment of
# docs/scale-out.md: jobs log over HTTP to `mlflow server`, whose backend store is PostgreSQL).
#
# Idempotent: installs Debian's postgresql only where missing, starts the first cluster only when
# it is down, creates the role and database only when absent. Works without systemd.
# Prints the backend-store URI on its last line; tests read it from $FLATSCORE_PG_URI_FILE
# (default /var/lib/flatscore-ci/postgres.uri).
#
# Needs root and Debian/Ubuntu (apt). Environment knobs:
#   PG_CI_NOAPT=1   skip apt-get (the package must be installed)
#   PG_CI_DB        database and role name (default mlflow)
set -euo pipefail

DB=${PG_CI_DB:-mlflow}
URI_FILE=${FLATSCORE_PG_URI_FILE:-/var/lib/flatscore-ci/postgres.uri}

die() { echo "postgres/setup.sh: ERROR: $*" >&2; exit 1; }
log() { echo "postgres/setup.sh: $*"; }

[[ $(id -u) -eq 0 ]] || die "must run as root (it installs a package and starts a daemon)"

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  [[ ${PG_CI_NOAPT:-0} == 1 ]] && die "postgresql is not installed and PG_CI_NOAPT=1"
  command -v apt-get >/dev/null 2>&1 || die "postgresql is not installed and there is no apt-get"
  log "installing postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null || die "apt-get install postgresql failed"
fi

read -r version cluster port status _ < <(pg_lsclusters --no-header | head -1) || die "no PostgreSQL cluster"
if [[ $status != online ]]; then
  log "starting cluster $version/$cluster on port $port"
  pg_ctlcluster "$version" "$cluster" start || die "pg_ctlcluster $version $cluster start failed"
fi
for _ in $(seq 30); do pg_isready -q -p "$port" && break; sleep 1; done
pg_isready -q -p "$port" || die "PostgreSQL did not accept connections on port $port"

# A password known only to this machine's CI state (the server listens on localhost only).
mkdir -p "$(dirname "$URI_FILE")"
secret_file="$(dirname "$URI_FILE")/postgres.password"
[[ -s $secret_file ]] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$secret_file")
password=$(cat "$secret_file")
psql_() { runuser -u postgres -- psql -p "$port" -v ON_ERROR_STOP=1 -qtA "$@"; }
if [[ -z $(psql_ -c "SELECT 1 FROM pg_roles WHERE rolname='$DB'") ]]; then
  psql_ -c "CREATE ROLE $DB LOGIN PASSWORD '$password'"
else
  psql_ -c "ALTER ROLE $DB PASSWORD '$password'"
fi
[[ -n $(psql_ -c "SELECT 1 FROM pg_database WHERE datname='$DB'") ]] || psql_ -c "CREATE DATABASE $DB OWNER $DB"

uri="postgresql://$DB:$password@127.0.0.1:$port/$DB"
(umask 077 && echo "$uri" > "$URI_FILE")
log "ready: backend store URI in $URI_FILE"
echo "postgresql://$DB:***@127.0.0.1:$port/$DB"
