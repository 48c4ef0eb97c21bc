#!/usr/bin/env bash
# Installs exactly the Debian 12 packages that the build, the tests, the benchmarks and the demo
# need. Idempotent: packages already present are skipped, and apt is not touched at all when
# nothing is missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail

packages=(
	gcc libc6-dev meson ninja-build pkg-config   # toolchain and build
	libuv1-dev libhiredis-dev libpq-dev libcjson-dev libcurl4-openssl-dev libssl-dev
	node-llhttp                                   # llhttp's C sources (/usr/share/llhttp)
	libcmocka-dev                                 # unit tests
	postgresql-15 redis-server                    # embedded services (private instances)
	curl                                          # HTTP tests drive the server with a real client
	wrk                                           # benchmarks
	clang-format                                  # format-check run target
	clang libclang-rt-14-dev                      # fuzz targets: libFuzzer, ASan/UBSan runtimes (tests/fuzz)
	chromium                                      # the status page test, headless (big: 25 packages, ~400 MB installed)
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "bootstrap: all ${#packages[@]} packages present"
	exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# --no-install-recommends keeps the image small; the Debian postgresql/redis packages start
# system-wide services on install, which the project never uses (it starts private instances),
# so policy-rc.d stops them from starting at all.
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
	$sudo chmod +x /usr/sbin/policy-rc.d
	trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "bootstrap: done"
