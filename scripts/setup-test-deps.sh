#!/usr/bin/env bash
# Installs the Debian packages the test suite drives as real processes:
# chromium (the gallery's browser test), prometheus (for promtool, which checks /metrics), iproute2
# (`ip`, which scripts/netns-mesh.sh builds its network namespaces with), curl and jq (docs/api.md's examples,
# run as written), and postgresql (the store's PostgreSQL tests start throwaway clusters of their own with its
# initdb and pg_ctl: no system service is used). Not ffmpeg: the agent and the tests use the system's when there is one, else the static ffmpeg and
# ffprobe `npm install` brings (@ffmpeg-installer/ffmpeg, @ffprobe-installer/ffprobe), so video is tested as a fresh
# machine runs it. wine and wine64 with mingw's C compiler: test/integration/windows-agent.test.ts runs an agent as a
# Windows process under Wine (scripts/wine-env.sh makes that Windows host, and builds a stand-in DLL Wine 8.0 lacks).
# systemd, for systemd-analyze: the unit `gpumesh agent service --print` writes is verified by it (nothing is started).
# Skips whatever is already installed; needs root (or sudo) only when something is missing.
set -euo pipefail

# Run as root, the agent runs its engine processes as `nobody`, who must be able to read this checkout (the ONNX
# worker's code) or it runs them as root and says so; the tests check that an engine cannot read the mesh's keys,
# which holds only when they run as nobody. A folder above the checkout that others cannot pass through (a home
# folder, a mktemp folder) gets o+x: entered, not listed.
if [ "$(id -u)" -eq 0 ]; then
  dir=$(cd "$(dirname "$0")/.." && pwd)
  while [ "$dir" != "/" ]; do
    if [ -z "$(find "$dir" -maxdepth 0 -perm -o+x)" ]; then
      chmod o+x "$dir"
      echo "o+x on $dir: engine processes (run as nobody) pass through it to the checkout"
    fi
    dir=$(dirname "$dir")
  done
fi

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v curl >/dev/null 2>&1 || need+=(curl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v wine >/dev/null 2>&1 || need+=(wine wine64)
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || need+=(gcc-mingw-w64-x86-64-win32)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)

if [ ${#need[@]} -eq 0 ]; then
  echo "test dependencies present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing: ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
