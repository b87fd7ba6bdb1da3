#!/bin/bash
# Stand-in for the official postgres image's docker-entrypoint.sh, run as uid 999 (the
# image's postgres user) with no root step: the part of its contract the operator relies on.
#   POSTGRES_PASSWORD (required on first start), POSTGRES_USER (default postgres),
#   POSTGRES_DB (default POSTGRES_USER), PGDATA, POSTGRES_INITDB_ARGS;
#   /docker-entrypoint-initdb.d/*.sh (run if executable, else sourced) and *.sql (psql),
#   in name order, once, on an empty data directory; then listen on every address with
#   scram-sha-256 for remote hosts.
set -Eeo pipefail
if [ "${1:0:1}" = '-' ]; then set -- postgres "$@"; fi
if [ "$1" = postgres ]; then
  : "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
  export POSTGRES_USER POSTGRES_DB
  mkdir -p "$PGDATA"
  chmod 00700 "$PGDATA" 2>/dev/null || :
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "$POSTGRES_PASSWORD" ]; then
      echo "error: database is uninitialized and POSTGRES_PASSWORD is not set" >&2
      exit 1
    fi
    # shellcheck disable=SC2086
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") $POSTGRES_INITDB_ARGS
    printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
    export PGPASSWORD="$POSTGRES_PASSWORD"
    if [ "$POSTGRES_DB" != postgres ]; then
      psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
        -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
      case "$f" in
        *.sh) echo "running $f"; if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
        *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -f "$f" ;;
        *) [ -e "$f" ] && echo "ignoring $f" ;;
      esac
    done
    unset PGPASSWORD
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
  fi
fi
exec "$@"
