#!/usr/bin/env bash
# Installs the Debian packages the test suite drives as real processes:
# chromium (the gallery's browser test), prometheus (for promtool, which checks /metrics), iproute2
# (`ip`, which scripts/netns-mesh.sh builds its network namespaces with), curl and jq (docs/api.md's examples,
# run as written), and postgresql (the store's PostgreSQL tests start throwaway clusters of their own with its
# initdb and pg_ctl: no system service is used). Not ffmpeg: the agent and the tests use the system's when there is one, else the static ffmpeg and
# ffprobe `npm install` brings (@ffmpeg-installer/ffmpeg, @ffprobe-installer/ffprobe), so video is tested as a fresh
# machine runs it.
# Skips whatever is already installed; needs root (or sudo) only when something is missing.
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v curl >/dev/null 2>&1 || need+=(curl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)

if [ ${#need[@]} -eq 0 ]; then
  echo "test dependencies present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing: ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
