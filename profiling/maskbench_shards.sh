#!/usr/bin/env bash
# profiling/maskbench.py sharded over the cores of one machine, then merged and summarised.
#
# Usage: profiling/maskbench_shards.sh OUT_DIR DATA_DIR BUDGET_S "ENGINE:SHARDS[@EVERY] ..."
#   e.g. profiling/maskbench_shards.sh out ../shared/maskbench/data 540 \
#            "gxg:9 xgrammar:5 llguidance:1 gxg-gpu:1@8"
# Each engine's files (every EVERY-th file, default all) are split over SHARDS processes
# (gxg-gpu's over the machine's GPUs in turn)
# (file i goes to shard i mod SHARDS); each process stops at BUDGET_S seconds. The rows of all
# shards are merged into OUT_DIR/maskbench.<engine>.rows.jsonl, and the summary covers the
# files that every CPU engine finished (gxg-gpu, a subset, is summarised on its own).
# Timings from concurrent processes share the machine: say how many ran at once.
# Seen 2026-11-26 on a 4-GPU host with 64 cores: 60+ shards at once wrote their first rows only
# after ~6 minutes (and few after), where 16 shards on a 16-core host start within a minute;
# the cause was not found (memory that the VM grows on demand is one suspect). Keep to ~16.
set -u
out=$1; data=$2; budget=$3; plan=$4
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); [[ $gpus -ge 1 ]] || gpus=1
engines=()
for item in $plan; do
  engine=${item%%:*}; rest=${item#*:}; shards=${rest%%@*}; every=1
  [[ $rest == *@* ]] && every=${rest#*@}
  engines+=("$engine")
  for ((k = 0; k < shards; k++)); do
    # gxg-gpu shards take the GPUs in turn (one process per GPU is the intended use)
    [[ $engine == gxg-gpu ]] && export CUDA_VISIBLE_DEVICES=$((k % gpus))
    timeout "$budget" python3 profiling/maskbench.py --engines "$engine" --data "$data" \
      --every $((shards * every)) --offset $((k * every)) --time-limit 60 --resume \
      --out "$out/shard_${engine}_$k.json" > "$out/shard_${engine}_$k.log" 2>&1 &
  done
  unset CUDA_VISIBLE_DEVICES
done
wait
cpu=()
for engine in "${engines[@]}"; do
  cat "$out"/shard_"${engine}"_*.rows.jsonl > "$out/maskbench.${engine}.rows.jsonl" 2>/dev/null
  [[ $engine != gxg-gpu ]] && cpu+=("$engine")
done
joined=$(IFS=,; echo "${cpu[*]}")
if [[ -n $joined ]]; then
  python3 profiling/maskbench.py --engines "$joined" --data "$data" --resume --summarize-only \
    --out "$out/maskbench.json" > "$out/summary.txt" 2>&1
fi
if [[ " ${engines[*]} " == *" gxg-gpu "* ]]; then
  # gxg-gpu beside the CPU ops on the files both finished, or alone (a plan without gxg)
  gpu_engines=gxg-gpu
  cp "$out/maskbench.gxg-gpu.rows.jsonl" "$out/maskbench_gpu.gxg-gpu.rows.jsonl"
  if [[ " ${engines[*]} " == *" gxg "* ]]; then
    cp "$out/maskbench.gxg.rows.jsonl" "$out/maskbench_gpu.gxg.rows.jsonl"
    gpu_engines=gxg-gpu,gxg
  fi
  python3 profiling/maskbench.py --engines "$gpu_engines" --data "$data" --resume \
    --summarize-only --out "$out/maskbench_gpu.json" > "$out/summary_gpu.txt" 2>&1
  [[ -n $joined ]] || cp "$out/summary_gpu.txt" "$out/summary.txt"
fi
