#!/usr/bin/env bash
# scripts/venv_torch.sh: the Python virtual environment that the torch 2.x
# flavour of the torch backend is built and tested with (integrations/torch):
# .venv-torch at the repository root, made by Debian's /usr/bin/python3 -m
# venv (python3-venv) without the system's site-packages, holding the
# current torch, pytest and numpy from PyPI. `make deps` runs it after
# scripts/deps.sh.
#
# Installs only what is missing (pip's cache makes a reinstall fast) and
# prints nothing when all is there. When the venv cannot be made or PyPI
# cannot be reached it prints one line, leaves the reason in
# .venv-torch/kizuna-no-torch.txt (configure names it when it registers the
# torch2 tests as skipped) and exits 0: the torch 2.x flavour is optional.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv-torch
py=$venv/bin/python
note=$venv/kizuna-no-torch.txt
modules=(torch pytest numpy)

skip() {
  echo "kizuna: $1; the torch 2.x tests will be skipped" >&2
  if [[ -d $venv ]]; then echo "$1" >"$note"; fi
  exit 0
}

# A venv without a working pip (python3-venv was missing when it was made)
# is made again.
if [[ -x $py ]] && ! "$py" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
fi
if [[ ! -x $py ]]; then
  if ! out=$(/usr/bin/python3 -m venv "$venv" 2>&1); then
    rm -rf "$venv"
    skip "cannot create $venv with /usr/bin/python3 -m venv (install python3-venv): $(tail -n 1 <<<"$out")"
  fi
fi

missing=()
for m in "${modules[@]}"; do
  "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$m') is None)" || missing+=("$m")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  rm -f "$note"
  exit 0
fi

echo "kizuna: installing ${missing[*]} from PyPI into $venv" >&2
if ! out=$("$py" -m pip install --disable-pip-version-check --quiet --retries 1 --timeout 20 "${missing[@]}" 2>&1); then
  skip "PyPI could not be reached or refused: pip install ${missing[*]} failed ($(grep -v '^\s*$' <<<"$out" | tail -n 1))"
fi
rm -f "$note"
