#!/bin/bash
# Makes the database cluster on first start (user and database from
# POSTGRES_USER / POSTGRES_DB, password from POSTGRES_PASSWORD, required;
# every connection over the network authenticates with SCRAM), then runs
# the server in the foreground.
set -euo pipefail
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-sandboxd}
db=${POSTGRES_DB:-sandboxd}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	pw=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
	"$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
	rm -f "$pw"
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
	echo "host all all ::/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
	"$bin/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
	"$bin/psql" -U "$user" -d postgres -v ON_ERROR_STOP=1 -qc "CREATE DATABASE \"$db\" OWNER \"$user\""
	"$bin/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec "$bin/postgres" -D "$PGDATA"
