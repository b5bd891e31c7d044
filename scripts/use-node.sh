# shellcheck shell=bash
# `source scripts/use-node.sh` (bash): installs the project's Node.js if needed (see
# scripts/node.sh) and puts it first on PATH in this shell. npm itself stays the one you
# have (its `#!/usr/bin/env node` then runs on this Node).
if _crd_migrator_node_bin="$(bash "$(dirname "${BASH_SOURCE[0]}")/node.sh")"; then
  export PATH="$_crd_migrator_node_bin:$PATH"
  hash -r
  unset _crd_migrator_node_bin
else
  unset _crd_migrator_node_bin
  echo "use-node.sh: could not install the project's Node.js (see above)" >&2
  return 1 2>/dev/null || exit 1
fi
