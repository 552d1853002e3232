#!/usr/bin/env bash
# Run by Snakemake inside the freshly created conda env (--sdm conda): install flatscore itself,
# without dependencies (the env file pins them), from the checkout. FLATSCORE_ROOT names the
# checkout; by default the directory Snakemake runs in (the repository root).
set -euo pipefail
root=${FLATSCORE_ROOT:-$PWD}
if [[ ! -f $root/pyproject.toml ]]; then
  echo "post-deploy: no pyproject.toml in '$root'; set FLATSCORE_ROOT to the flatscore checkout" >&2
  exit 1
fi
python -m pip install --no-deps -e "$root"
