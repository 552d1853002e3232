#!/usr/bin/env bash
# Stop the PostgreSQL cluster that setup.sh started (its data stays for the next run).
set -uo pipefail
command -v pg_lsclusters >/dev/null 2>&1 || exit 0
read -r version cluster _ status _ < <(pg_lsclusters --no-header | head -1) || exit 0
[[ $status == online ]] && pg_ctlcluster "$version" "$cluster" stop
exit 0
