#!/usr/bin/env bash
# Builds a real RPM database (rpm 4.18's `rpmdb.sqlite`, as RHEL 9 images hold) of COUNT
# packages for the load generator's RHEL-shaped layers, with Debian's rpm tools: COUNT empty
# packages made by rpmbuild and recorded by `rpm --justdb`, so the database is what rpm itself
# writes. Cached once per COUNT and script. Prints the database's path on its last line.
# Usage: tools/rpmdb/build.sh COUNT
set -euo pipefail
count=${1:?usage: tools/rpmdb/build.sh COUNT}
[[ $count =~ ^[1-9][0-9]{0,3}$ ]] || { echo "rpmdb: COUNT is a number of packages, 1 to 9999: $count" >&2; exit 1; }
for tool in rpm rpmbuild sqlite3; do
  command -v "$tool" >/dev/null 2>&1 ||
    { echo "rpmdb: $tool is missing: install Debian's rpm and sqlite3 packages (scripts/install-deps does)" >&2; exit 1; }
done
cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
# The script and the rpm that writes the database name the cache entry.
sum=$( { cat "${BASH_SOURCE[0]}"; rpm --version; } | sha256sum | cut -c1-12)
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
BuildArch: noarch
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
  # Recorded, never installed (no files, no scripts). Debian's rpm warns that it is not
  # Debian's package manager: that warning is dropped, anything else is shown.
  rpm --root "$work/root" --dbpath /var/lib/rpm --define '_db_backend sqlite' --justdb \
    --nodeps --noscripts --notriggers --ignorearch --ignoreos -i "$work"/top/RPMS/*/*.rpm \
    2> >(grep -v -e 'use Alien instead' -e 'assuming you know what you are doing' >&2)
  # One self-contained file: the write-ahead log folded in.
  sqlite3 "$work/root/var/lib/rpm/rpmdb.sqlite" 'PRAGMA journal_mode=DELETE;' >/dev/null
  installed=$(rpm --root "$work/root" --dbpath /var/lib/rpm -qa | wc -l)
  [ "$installed" -eq "$count" ] || { echo "rpmdb: $installed packages recorded, not $count" >&2; exit 1; }
  mkdir -p "$out"
  mv "$work/root/var/lib/rpm/rpmdb.sqlite" "$out/rpmdb.sqlite.tmp"
  mv "$out/rpmdb.sqlite.tmp" "$out/rpmdb.sqlite"
fi
echo "$out/rpmdb.sqlite"
