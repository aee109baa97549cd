#!/bin/sh
# Starts redis-server with its password in a config file only the server can read, so the password is
# never on a command line (ps, /proc/*/cmdline). The password comes from REDISCLI_AUTH, which
# redis-cli also reads, so the healthcheck needs no -a either. Extra arguments go to redis-server.
set -eu
: "${REDISCLI_AUTH:?set REDISCLI_AUTH to the Redis password}"
case "$REDISCLI_AUTH" in
  *[!A-Za-z0-9._~-]*) echo "redis.sh: the password may hold only letters, digits and . _ ~ - (it is part of AO_REDIS_URL)" >&2; exit 2 ;;
esac
umask 077
conf="$(mktemp)"
printf 'requirepass %s\nappendonly yes\n' "$REDISCLI_AUTH" > "$conf"
if [ "$(id -u)" = 0 ] && id redis >/dev/null 2>&1; then
  chown redis "$conf"  # the image's entrypoint drops to the redis user
fi
if command -v docker-entrypoint.sh >/dev/null 2>&1; then
  exec docker-entrypoint.sh redis-server "$conf" "$@"
fi
exec redis-server "$conf" "$@"
