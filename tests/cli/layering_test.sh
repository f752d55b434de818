#!/usr/bin/env bash
# cli/ depends on app/ only (docs/ARCHITECTURE.md): its files include the
# application layer, the command line's own headers and core's errors and
# terminal helpers, and name no lower layer's namespace. Fails listing each
# line that reaches past app/.
# Usage: layering_test.sh SOURCE_DIR
set -euo pipefail
cli="$1/src/meshtrain/cli"
bad=$(grep -n -E '#include "meshtrain/' "$cli"/*.cc "$cli"/*.h |
      grep -v -E '"meshtrain/(app|cli)/|"meshtrain/core/(error|status_line|suggest)\.h"' || true)
names=$(grep -n -E '\b(train|plan|model|parallel|comm|data|checkpoint|kernels|optim|report)::' "$cli"/*.cc "$cli"/*.h || true)
if [ -n "$bad$names" ]; then
  echo "cli/ reaches past app/:"
  [ -z "$bad" ] || echo "$bad"
  [ -z "$names" ] || echo "$names"
  exit 1
fi
echo "cli/ includes app/, cli/ and core's error, status line and suggestion headers only"
