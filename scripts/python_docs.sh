#!/usr/bin/env bash
# The Python documentation as a corpus: Debian's python3-doc package (its HTML lives in python3.11-doc), fetched
# with `apt-get download` (no root needed once the package lists are there) and unpacked with `dpkg -x` into the
# project's cache root, nothing installed system-wide. Idempotent: a second run only prints the folder.
#
#   bash scripts/python_docs.sh        # prints the HTML folder: <cache>/python-docs/html
#
# The cache root is ICR2_CACHE_DIR or ~/.cache/icr2_components (icr2_components/paths.py); indexing/python-docs.yaml
# reads the folder as "{cache}/python-docs/html". Set ICR2_PYTHON_DOC_PACKAGES to fetch other packages (the first
# one holding usr/share/doc/python3*/html wins).
set -euo pipefail

cache=${ICR2_CACHE_DIR:-$HOME/.cache/icr2_components}
root=$cache/python-docs
html=$root/html
packages=${ICR2_PYTHON_DOC_PACKAGES:-"python3-doc python3.11-doc"}
stamp=$root/.unpacked-$(echo "$packages" | tr ' ' '+')

if [ -f "$stamp" ] && [ -d "$html/" ]; then
  echo "$html"
  exit 0
fi

for tool in apt-get dpkg; do
  command -v "$tool" >/dev/null || { echo "python_docs.sh: needs $tool (a Debian or Ubuntu machine)" >&2; exit 1; }
done
mkdir -p "$root/debs"
work=$(mktemp -d "$root/.unpack.XXXXXX")
trap 'rm -rf "$work"' EXIT
(
  cd "$root/debs"
  # apt-get download needs the package lists; on a fresh machine (as root) read them first
  if ! apt-get download $packages >&2; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq >&2
      apt-get download $packages >&2
    else
      echo "python_docs.sh: apt-get download $packages failed; run 'sudo apt-get update' and try again" >&2
      exit 1
    fi
  fi
)
for package in $packages; do
  deb=$(ls -t "$root/debs/${package}"_*.deb | head -n 1)
  dpkg -x "$deb" "$work/tree"
done
found=$(find "$work/tree/usr/share/doc" -mindepth 2 -maxdepth 2 -type d -name html -path '*/python3*' \
        ! -type l | sort | head -n 1)
if [ -z "$found" ] || [ ! -f "$found/index.html" ]; then
  echo "python_docs.sh: no HTML documentation (usr/share/doc/python3*/html/index.html) in $packages" >&2
  exit 1
fi
rm -rf "$root/tree" "$html"
mv "$work/tree" "$root/tree"
ln -s "tree/${found#"$work/tree/"}" "$html"
rm -f "$root"/.unpacked-*
touch "$stamp"
echo "$html"
