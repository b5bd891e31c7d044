#!/usr/bin/env bash
# Runs a command on the project's Node.js (.node-version), installed on first use (see
# scripts/node.sh). The npm scripts that run code go through it, so `npm start` and
# `npm test` work as the README writes them from a shell still on another Node.
set -euo pipefail
# shellcheck source=scripts/use-node.sh
source "$(dirname "${BASH_SOURCE[0]}")/use-node.sh"
exec "$@"
