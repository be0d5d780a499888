#!/bin/sh
# Entry point of the runtime image: a shell by default, `selftest` for the self-test,
# anything else is run as given.
set -eu
if [ "$#" -eq 0 ]; then
    exec /bin/bash -l
fi
if [ "$1" = "selftest" ]; then
    shift
    exec python /opt/dwconv/selftest.py "$@"
fi
exec "$@"
