#!/usr/bin/env bash
# bench-small side by side: meshtrain (bench/bench_small) and PyTorch
# (bench/torch_bench_small.py, Debian's python3-torch) on the same model,
# shapes, optimizer and random tokens, fp32, in the same run, alternating;
# prints tokens/s of each and the ratio per thread count, also per core-second
# of CPU time (the ratio that holds when other processes share the cores).
#   bench/compare-torch.sh [BUILD_DIR] [STEPS] [THREADS...]   (default build 5 1 2)
# MODEL=gpt2-124m compares GPT-2 124M (tied, vocab 50257, B4 T256) instead,
# with the peak resident memory of each process after its steps;
# PRECISION=bf16 runs meshtrain's step under the bf16 policy (PyTorch stays
# fp32: the ratio is then meshtrain bf16 over PyTorch fp32); HEAD_CHUNK_ROWS=N
# runs meshtrain's LM head and loss in backward N rows at a time
# (training.head_chunk_rows).
# Installs python3-torch and OpenBLAS (OpenMP build) when missing (root, apt):
# without an optimized BLAS Debian's torch runs the reference BLAS, ~50x
# slower. Environment passes through
# (MESHTRAIN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 forces meshtrain's AVX2 code).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
threads=(1 2)
model=${MODEL:-bench-small}
precision=${PRECISION:-fp32}
head_chunk_rows=${HEAD_CHUNK_ROWS:-0}
[ $# -eq 0 ] || threads=("$@")

# Debian's interpreter, where python3-torch installs (not a python3 earlier in PATH).
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c "import torch" 2>/dev/null || ! dpkg -s libopenblas0-openmp >/dev/null 2>&1; then
  echo "compare-torch: installing python3-torch libopenblas0-openmp"
  if [ "$(id -u)" -ne 0 ]; then
    echo "compare-torch: run as root or: sudo apt-get install python3-torch libopenblas0-openmp"
    exit 2
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch libopenblas0-openmp >/dev/null
fi
# The same ISA for both: MESHTRAIN_ISA=avx2 also holds OpenBLAS and ATen to AVX2.
if [ "${MESHTRAIN_ISA:-}" = avx2 ]; then
  export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx2}
elif [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  # Some machines set it machine-wide (old OpenBLAS builds misbehave there):
  # PyTorch's GEMMs then run that core's kernels while meshtrain runs its
  # own level, and the ratio is not like for like.
  echo "compare-torch: note: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE holds PyTorch's OpenBLAS to that core's kernels;" \
    "meshtrain runs ${MESHTRAIN_ISA:-its best level}. MESHTRAIN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 compares at one level"
fi
[ -x "$build/bench/bench_small" ] || { echo "compare-torch: $build/bench/bench_small not built (make build)"; exit 2; }

# "tokens/s" and "tokens per core-second" of each line (both print them).
field() { awk -v key="$1" '{ n = split(key, k, " "); for (i = 1; i + n <= NF; ++i) { ok = 1;
  for (j = 1; j <= n; ++j) if ($(i + j) != k[j]) ok = 0; if (ok) { print $i; exit } } }'; }
for t in "${threads[@]}"; do
  mesh=$(OMP_NUM_THREADS=$t "$build/bench/bench_small" --steps "$steps" --threads "$t" --model "$model" \
    --precision "$precision" --head-chunk-rows "$head_chunk_rows")
  echo "$mesh"
  torch=$(OMP_NUM_THREADS=$t "$python" bench/torch_bench_small.py --threads "$t" --steps "$steps" --model "$model")
  echo "$torch"
  m_wall=$(grep -E '^threads [0-9]+: median step' <<<"$mesh" | field "tokens/s")
  m_cpu=$(grep -E 'CPU time:' <<<"$mesh" | field "tokens per core-second")
  p_wall=$(field "tokens/s" <<<"$torch")
  p_cpu=$(field "tokens per core-second" <<<"$torch")
  m_rss=$(grep -E 'peak resident memory' <<<"$mesh" | awk '{ print $(NF - 1) }')
  p_rss=$(grep -E 'peak resident memory' <<<"$torch" | awk '{ print $(NF - 1) }')
  awk -v t="$t" -v mw="$m_wall" -v pw="$p_wall" -v mc="$m_cpu" -v pc="$p_cpu" -v mr="$m_rss" -v pr="$p_rss" \
      -v what="$model, meshtrain $precision vs PyTorch fp32" 'BEGIN {
    printf "compare-torch: %s, %d thread(s): meshtrain %.0f tokens/s, PyTorch %.0f tokens/s -> %.2fx", what, t, mw, pw, mw / pw
    printf " | per core-second %.0f vs %.0f -> %.2fx", mc, pc, mc / pc
    printf " | peak resident %.0f vs %.0f MiB -> %.2fx\n", mr, pr, mr / pr }'
done
