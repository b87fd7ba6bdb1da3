#!/usr/bin/env bash
# Builds the container images the real-node tests import into containerd, without any
# registry, under exactly the names the operator renders:
#   quay.io/projectquay/clair:VERSION  clair + clairctl laid out as Clair's official image
#                                      (ENTRYPOINT /usr/bin/clair, USER nobody:nobody with
#                                      nobody = 65534 in /etc/passwd, CA certificates, /bin/sh)
#   docker.io/library/postgres:17      a stand-in from Debian's PostgreSQL packages that
#                                      honours the official image's entrypoint contract
#   registry.k8s.io/pause:3.10         the pod sandbox (a static C program)
#   clair-testenv.local/client:1       busybox and openssl: a tenant's pod sending requests
#   quay.io/projectquay/clair-operator:TAG  the operator's release binary, non-root (65532),
#                                      under the name and tag deploy/base/kustomization.yaml
#                                      gives it
#   ghcr.io/cloudnative-pg/cloudnative-pg:testenv  CloudNativePG's manager as /manager (its
#                                      pods' init container copies it in: the instance manager)
#   ghcr.io/cloudnative-pg/postgresql:MAJOR  an operand image from Debian's PostgreSQL (every
#                                      server binary on PATH, the user postgres = 26), tagged
#                                      with the major version it holds: CloudNativePG reads it
#                                      from the tag
# Each image is an OCI layout made with umoci, saved as a docker-archive with skopeo, cached
# by a hash of its inputs. Prints the path of each archive (NAME.tar) of this build, one a
# line.
#
#   build.sh [--operator BINARY] [--cloudnative-pg DIR] CLAIR_BIN_DIR=VERSION ...
#       one Clair image per folder (clair and clairctl inside), tagged VERSION; the
#       operator's image when its binary is given; CloudNativePG's two when the folder
#       tools/cloudnative-pg/build.sh prints is given
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "images/build.sh: $*" >&2; exit 1; }
for tool in umoci skopeo gcc busybox; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing: run scripts/install-deps (Debian packages umoci, skopeo, gcc, busybox-static)"
done
# The Clair image has no C library: its shell must be a static busybox.
ldd "$(command -v busybox)" >/dev/null 2>&1 && die "$(command -v busybox) is linked dynamically: install Debian's busybox-static"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
[ -n "$pg_bin" ] || die "PostgreSQL server binaries are missing: run scripts/install-deps"
pg_major=$(basename "$(dirname "$pg_bin")")

cache=${CLAIR_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clair-operator}
out="$cache/images"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

# A folder tree as a one-layer image. image NAME:TAG ROOTFS [umoci config flags...]
image() {
  local ref=$1 rootfs=$2; shift 2
  local file="$out/$(echo "$ref" | tr '/:' '__').tar"
  # Every path with its type, mode, size, owner, group and link target, then the contents.
  local key; key=$( (cd "$rootfs" && find . -printf '%p %y %m %s %U %G %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 cat) | sha256sum | cut -c1-16)
  key="$key-$(echo "$*" | sha256sum | cut -c1-8)"
  if [ -s "$file" ] && [ "$(cat "$file.key" 2>/dev/null)" = "$key" ]; then echo "$file"; return; fi
  echo "images/build.sh: building $ref" >&2
  local layout="$work/layout-${file##*/}"
  umoci init --layout "$layout" >/dev/null
  umoci new --image "$layout:img" >/dev/null
  umoci insert --image "$layout:img" "$rootfs" / >/dev/null
  umoci config --image "$layout:img" --os linux --architecture "$arch" "$@" >/dev/null
  rm -f "$file.tmp"
  skopeo copy --quiet "oci:$layout:img" "docker-archive:$file.tmp:$ref" >/dev/null
  mv "$file.tmp" "$file"
  echo "$key" >"$file.key"
  echo "$file"
}

# Copies binaries and the shared libraries they load into ROOTFS at the same paths.
copy_with_libs() {
  local rootfs=$1; shift
  local f lib
  for f in "$@"; do
    mkdir -p "$rootfs$(dirname "$f")"
    cp -aL "$f" "$rootfs$f"
    { ldd "$f" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r lib; do
      [ -e "$rootfs$lib" ] && continue
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -aL "$lib" "$rootfs$lib"
    done
  done
}

# Files every image shares: users, CA certificates, a shell, scratch folders.
base_rootfs() { # base_rootfs DIR USER_LINE GROUP_LINE
  local root=$1
  mkdir -p "$root"/{etc/ssl/certs,bin,tmp,var/tmp,run}
  chmod 1777 "$root/tmp" "$root/var/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n%s\n' "$2" >"$root/etc/passwd"
  printf 'root:x:0:\n%s\n' "$3" >"$root/etc/group"
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
}

# Debian's PostgreSQL in ROOTFS: bash, the server binaries named (all of them when none are)
# with their libraries and shared files, zoneinfo, the C.UTF-8 locale initdb takes from LANG,
# and busybox's basic applets.
postgres_files() { # postgres_files ROOTFS [BINARY...]
  local root=$1; shift
  local binaries=("$@")
  [ ${#binaries[@]} -gt 0 ] || binaries=("$pg_bin"/*)
  copy_with_libs "$root" /bin/bash "${binaries[@]}" $(ls /usr/lib/postgresql/"$pg_major"/lib/*.so)
  mkdir -p "$root/usr/share/postgresql" "$root/usr/lib/locale" "$root/var/lib/postgresql"
  cp -a "/usr/share/postgresql/$pg_major" "$root/usr/share/postgresql/"
  cp -aL /usr/share/zoneinfo "$root/usr/share/"
  cp -a /usr/lib/locale/C.utf8 "$root/usr/lib/locale/"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for applet in cat ls mkdir chmod rm; do ln -sf busybox "$root/bin/$applet"; done
  ln -sf bash "$root/bin/sh"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
built=()

# The pod sandbox.
mkdir -p "$work/pause"
gcc -static -Os -o "$work/pause/pause" "$here/pause.c"
strip "$work/pause/pause"
built+=("$(image registry.k8s.io/pause:3.10 "$work/pause" --config.entrypoint /pause --config.user 65535:65535)")

operator=""
cloudnative_pg=""
clairs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --operator) operator=$2; shift 2 ;;
    --cloudnative-pg) cloudnative_pg=$2; shift 2 ;;
    *=*) clairs+=("$1"); shift ;;
    *) die "unknown argument $1 (want --operator BINARY, --cloudnative-pg DIR or CLAIR_BIN_DIR=VERSION)" ;;
  esac
done

# Clair, as its official Dockerfile lays it out.
for spec in "${clairs[@]}"; do
  dir=${spec%%=*}
  version=${spec#*=}
  [ -x "$dir/clair" ] && [ -x "$dir/clairctl" ] || die "$dir holds no clair and clairctl: build them with tools/clair/build.sh"
  root="$work/clair-$version"
  base_rootfs "$root" 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' 'nobody:x:65534:'
  mkdir -p "$root/usr/bin" "$root/config"
  cp "$dir/clair" "$dir/clairctl" "$root/usr/bin/"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for applet in sh cat ls wget; do ln -s busybox "$root/bin/$applet"; done
  built+=("$(image "quay.io/projectquay/clair:$version" "$root" \
    --config.entrypoint /usr/bin/clair \
    --config.env CLAIR_CONF=/config/config.yaml --config.env CLAIR_MODE=combo \
    --config.env SSL_CERT_DIR=/etc/ssl/certs:/etc/pki/tls/certs:/var/run/certs \
    --config.env PATH=/usr/bin:/bin \
    --config.user nobody:nobody --config.workingdir /run \
    --config.exposedports 6060/tcp --config.exposedports 6061/tcp --config.volume /config)")
done

# PostgreSQL from Debian's packages, behind the official image's entrypoint contract.
root="$work/postgres"
base_rootfs "$root" 'postgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/bash' 'postgres:x:999:'
postgres_files "$root" "$pg_bin"/{postgres,initdb,pg_ctl,psql,pg_isready,createdb}
mkdir -p "$root/usr/local/bin" "$root/var/lib/postgresql/data" "$root/var/run/postgresql" "$root/docker-entrypoint-initdb.d"
cp "$here/postgres-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
chown -R 999:999 "$root/var/lib/postgresql" "$root/var/run/postgresql"
chmod 3777 "$root/var/run/postgresql"
built+=("$(image docker.io/library/postgres:17 "$root" \
  --config.entrypoint /usr/local/bin/docker-entrypoint.sh --config.cmd postgres \
  --config.env "PATH=/usr/lib/postgresql/$pg_major/bin:/usr/local/bin:/usr/bin:/bin" \
  --config.env PGDATA=/var/lib/postgresql/data --config.env LANG=C.UTF-8 \
  --config.user 999:999 --config.stopsignal SIGINT \
  --config.exposedports 5432/tcp --config.volume /var/lib/postgresql/data)")

# CloudNativePG: its manager in an image of its own (the instance pods' init container runs
# `/manager bootstrap /controller/manager`), and an operand image from Debian's PostgreSQL.
# The official operand image is Debian's PostgreSQL too (from the PGDG repository, at every
# major); this one holds the major Debian ships, without the extensions and the backup tools.
if [ -n "$cloudnative_pg" ]; then
  [ -x "$cloudnative_pg/manager" ] || die "$cloudnative_pg holds no manager: build it with tools/cloudnative-pg/build.sh"
  root="$work/cloudnative-pg"
  base_rootfs "$root" 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' 'nonroot:x:65532:'
  cp "$cloudnative_pg/manager" "$root/manager"
  built+=("$(image ghcr.io/cloudnative-pg/cloudnative-pg:testenv "$root" \
    --config.entrypoint /manager --config.user 65532:65532)")
  root="$work/cloudnative-pg-operand"
  base_rootfs "$root" 'postgres:x:26:26:PostgreSQL:/var/lib/postgresql:/bin/sh' 'postgres:x:26:'
  postgres_files "$root"
  chown -R 26:26 "$root/var/lib/postgresql"
  built+=("$(image "ghcr.io/cloudnative-pg/postgresql:$pg_major" "$root" \
    --config.env "PATH=/usr/lib/postgresql/$pg_major/bin:/usr/local/bin:/usr/bin:/bin" \
    --config.env LANG=C.UTF-8 --config.user 26:26)")
fi

# A tenant's client, for tests that send requests from a pod: busybox, whose wget speaks TLS
# through openssl when it finds it (busybox's own TLS sends no signature_algorithms extension,
# which rustls servers such as the operator's webhook refuse).
command -v openssl >/dev/null 2>&1 || die "openssl is missing: install Debian's openssl"
root="$work/client"
base_rootfs "$root" 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' 'nobody:x:65534:'
copy_with_libs "$root" "$(command -v openssl)"
cp "$(command -v busybox)" "$root/bin/busybox"
for applet in sh cat printf wget; do ln -sf busybox "$root/bin/$applet"; done
built+=("$(image clair-testenv.local/client:1 "$root" \
  --config.entrypoint /bin/sh --config.env PATH=/usr/bin:/bin --config.user 65534:65534)")

# The operator, from the binary given (the real-node tests give their debug build, stripped
# here of its debug info), named as deploy/base names it.
if [ -n "$operator" ]; then
  [ -x "$operator" ] || die "$operator is not an executable: cargo build --bin clair-operator"
  kustomization="$here/../../deploy/base/kustomization.yaml"
  name=$(awk '/- name: .*clair-operator/ {print $3; exit}' "$kustomization")
  tag=$(awk '/newTag:/ {gsub(/"/, "", $2); print $2; exit}' "$kustomization")
  [ -n "$name" ] && [ -n "$tag" ] || die "cannot read the operator's image name and tag from $kustomization"
  root="$work/operator"
  base_rootfs "$root" 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' 'nonroot:x:65532:'
  copy_with_libs "$root" "$operator"
  mkdir -p "$root/usr/bin"
  mv "$root$operator" "$root/usr/bin/clair-operator"
  strip "$root/usr/bin/clair-operator"
  built+=("$(image "$name:$tag" "$root" \
    --config.entrypoint /usr/bin/clair-operator --config.cmd run \
    --config.user 65532:65532 --config.exposedports 8443/tcp --config.exposedports 8080/tcp)")
fi

printf '%s\n' "${built[@]}"
