#!/usr/bin/env bash
# A portable binary must not run AVX code on a CPU without it. The per-ISA
# kernel objects (kernels/cpu/per_isa/, compiled for avx2 and avx512) may hold
# VEX/EVEX instructions only in functions of their own namespace
# (meshtrain::kernels::avx2 / ::avx512) or in local symbols: a shared inline
# function or template compiled there with AVX, if the linker kept that copy,
# would also serve baseline callers. Exits non-zero naming each offender.
#   scripts/check-isa-objects.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: check-isa-objects.sh BUILD_DIR}
status=0
checked=0
for level in avx2 avx512; do
  dir="$build/src/meshtrain/kernels/CMakeFiles/mt_kernels_$level.dir"
  [ -d "$dir" ] || { echo "check-isa-objects: $dir not found (build mt_kernels first)"; exit 2; }
  ns="9meshtrain7kernels${#level}${level}"  # mangled prefix of meshtrain::kernels::<level>
  while IFS= read -r obj; do
    checked=$((checked + 1))
    # Global and weak symbols with VEX/EVEX code, outside the level's namespace.
    bad=$(objdump -d --no-show-raw-insn "$obj" | awk -v ns="$ns" '
      /^[0-9a-f]+ <.*>:$/ { sym = substr($2, 2, length($2) - 3); next }
      /\t(v[a-z0-9]+|k[a-z]+[bwdq]?) / || /%[yz]mm|%k[0-7]/ { if (sym != "" && index(sym, ns) == 0) wide[sym] = 1 }
      END { for (s in wide) print s }')
    [ -n "$bad" ] || continue
    globals=$(nm --defined-only "$obj" | awk '$2 ~ /^[TWVu]$/ { print $3 }')
    while IFS= read -r sym; do
      if grep -qxF "$sym" <<<"$globals"; then
        echo "check-isa-objects: $(basename "$obj"): $(c++filt "$sym") has $level code outside namespace meshtrain::kernels::$level"
        status=1
      fi
    done <<<"$bad"
  done < <(find "$dir" -name '*.o')
done
[ "$checked" -gt 0 ] || { echo "check-isa-objects: no objects found under $build"; exit 2; }
[ "$status" -eq 0 ] && echo "check-isa-objects: $checked per-ISA objects clean"
exit "$status"
