#!/bin/sh
# usage: format.sh CLANG_FORMAT fix|check — formats (or checks) every C file the project owns.
set -eu
cf=$1
mode=$2
cd "${MESON_SOURCE_ROOT:-$(dirname "$0")/../..}"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find common dispatcher tests bench -name '*.[ch]')
if [ "$mode" = fix ]; then
	exec "$cf" -i $files
fi
exec "$cf" --dry-run --Werror $files
