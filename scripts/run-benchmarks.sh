#!/usr/bin/env bash
# Runs every benchmark against an existing build directory (default build/).
# Figures are medians; the machine is shared, so compare ratios within a run.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."

echo "== kernels (GEMM on bench-small shapes, elementwise) =="
"$build/bench/kernels_bench" --benchmark_min_time=0.2
echo "== attention =="
"$build/bench/attention_bench" --benchmark_min_time=0.2
echo "== bench-small end-to-end step =="
"$build/bench/bench_small"
echo "== bench-small, AVX2 code and AVX2 peak (MESHTRAIN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2) =="
MESHTRAIN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 "$build/bench/bench_small"
echo "== bench-small vs PyTorch (python3-torch, same model and run) =="
bash bench/compare-torch.sh "$build"
echo "== shared cores (the demo next to 1, 2, 4 busy processes; PyTorch under the same load) =="
bash bench/shared-cores.sh "$build"
echo "== data parallelism / ZeRO (R=2, threads) =="
"$build/bench/dp_bench"
echo "== pipeline schedules (threads, 1 compute thread per stage) =="
"$build/bench/pipeline_bench"
echo "== tensor parallelism (tp=2 vs dp=2 vs one rank, threads) =="
"$build/bench/tp_bench"
echo "== context parallelism (cp=2 vs one rank on long sequences, threads) =="
"$build/bench/cp_bench" --seq 1024 --seq 4096
echo "== collectives (threads backend) =="
for n in 2 4; do "$build/bin/meshtrain" bench comm --ranks "$n"; done
if command -v mpirun >/dev/null; then
  echo "== collectives (MPI backend) =="
  for n in 2 4; do
    mpirun -np "$n" --oversubscribe --allow-run-as-root "$build/bin/meshtrain" bench comm --backend mpi
  done
fi
echo "== datasets (SHA-256 check at open) =="
"$build/bench/data_bench"
if [ -x "$build/bench/checkpoint_bench" ]; then
  echo "== checkpoints =="
  "$build/bench/checkpoint_bench"
fi
