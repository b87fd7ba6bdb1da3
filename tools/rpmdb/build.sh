#!/usr/bin/env bash
# Builds a real RPM database (rpm 4.18's `rpmdb.sqlite`, as RHEL 9 images hold) of COUNT
# packages for the load generator's RHEL-shaped layers, with Debian's rpm tools: COUNT empty
# packages made by rpmbuild and recorded by `rpm --justdb`, so the database is what rpm itself
# writes. Cached once per COUNT and script. Prints the database's path on its last line.
# Usage: tools/rpmdb/build.sh COUNT
set -euo pipefail
count=${1:?usage: tools/rpmdb/build.sh COUNT}
[[ $count =~ ^[1-9][0-9]{0,3}$ ]] || { echo "rpmdb: COUNT is a number of packages, 1 to 9999: $count" >&2; exit 1; }
for tool in rpm rpmbuild; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "rpmdb: $tool is missing: install Debian's rpm package (scripts/install-deps does)" >&2; exit 1; }
done
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
sum=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
out="$cache/tools/rpmdb-$sum-$count"
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [ ! -s "$out/rpmdb.sqlite" ]; then
  echo "rpmdb: building an RPM database of $count packages..." >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cat >"$work/package.spec" <<'SPEC'
Name: %{package}
Version: 1.%{index}.0
Release: 1.el9
Summary: A package the load generator made
License: MIT
BuildArch: x86_64
%description
A package the load generator made.
%files
SPEC
  for ((i = 0; i < count; i++)); do
    rpmbuild -bb --quiet --define "_topdir $work/top" --define "package rhel-load-$i" \
      --define "index $i" "$work/package.spec" >/dev/null
  done
  mkdir -p "$work/root/var/lib/rpm"
  rpm --root "$work/root" --dbpath /var/lib/rpm --define '_db_backend sqlite' --initdb
  # Debian's rpm warns that it is not Debian's package manager: these packages are never
  # installed, only recorded.
  rpm --root "$work/root" --dbpath /var/lib/rpm --define '_db_backend sqlite' --justdb \
    --nodeps --noscripts --notriggers --ignorearch --ignoreos -i "$work"/top/RPMS/*/*.rpm 2>/dev/null
  # One self-contained file: the write-ahead log folded in.
  sqlite3 "$work/root/var/lib/rpm/rpmdb.sqlite" 'PRAGMA journal_mode=DELETE;' >/dev/null
  installed=$(rpm --root "$work/root" --dbpath /var/lib/rpm -qa | wc -l)
  [ "$installed" -eq "$count" ] || { echo "rpmdb: $installed packages recorded, not $count" >&2; exit 1; }
  mkdir -p "$out"
  mv "$work/root/var/lib/rpm/rpmdb.sqlite" "$out/rpmdb.sqlite.tmp"
  mv "$out/rpmdb.sqlite.tmp" "$out/rpmdb.sqlite"
fi
echo "$out/rpmdb.sqlite"
