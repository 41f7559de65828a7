#!/usr/bin/env sh
# Install kdraexp and its dependencies into PREFIX, ready to run read-only: the twisted plugin
# cache is built and every module byte-compiled now, so nothing is written at run time.
# Run it as `PYTHONPATH=PREFIX PREFIX/bin/twistd -n --pidfile= kdraexp` (the image does) or
# `PYTHONPATH=PREFIX python3 -m kdraexp`.  Used by the Dockerfile and by the tests.
set -eu
prefix=$1
python=${PYTHON:-python3}
src=$(cd "$(dirname "$0")/.." && pwd)
"$python" -m pip install --no-cache-dir --quiet --break-system-packages \
    --root-user-action=ignore --target "$prefix" "$src"
PYTHONPATH=$prefix "$python" -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"
test -f "$prefix/twisted/plugins/dropin.cache"
test -x "$prefix/bin/twistd"
"$python" -m compileall -q "$prefix"
