#!/usr/bin/env bash
# torchrun launch for llama2-70b on mixed-pool-8k: tp 8, dp 2, pp 8, micro-batch 1, stages 13-13-13-13-7-7-7-7
# Run `bash torchrun.sh NODE_RANK [extra Megatron-LM args...]` on every node of the hostfile (its k-th host
# is node rank k). Megatron-LM orders ranks tp, then cp, then dp, then pp, so pipeline stage i runs on
# global ranks [16 i, 16 (i + 1)), and these node ranks put every stage on the node type the plan chose.
# Set MEGATRON_DIR to your Megatron-LM checkout and MASTER_ADDR to the host of node rank 0.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/megatron_args.sh"
MEGATRON_DIR="${MEGATRON_DIR:-.}"
if [ ! -f "$MEGATRON_DIR/$MEGATRON_ENTRY" ]; then
  echo "torchrun.sh: $MEGATRON_DIR/$MEGATRON_ENTRY not found (from $PWD): set MEGATRON_DIR to your Megatron-LM checkout" >&2
  exit 2
fi
MASTER_ADDR="${MASTER_ADDR:-p5-48xlarge-0}"
MASTER_PORT="${MASTER_PORT:-6000}"
export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM requires it with tp > 1 (before Blackwell)
NODE_RANK="${1:?usage: bash torchrun.sh NODE_RANK (0..15) [extra Megatron-LM args]}"
shift
case "$NODE_RANK" in
  # p5-48xlarge-0: p5.48xlarge, global ranks 0-7, stage 0
  0) torchrun --nnodes 16 --node-rank 0 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-1: p5.48xlarge, global ranks 8-15, stage 0
  1) torchrun --nnodes 16 --node-rank 1 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-2: p5.48xlarge, global ranks 16-23, stage 1
  2) torchrun --nnodes 16 --node-rank 2 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-3: p5.48xlarge, global ranks 24-31, stage 1
  3) torchrun --nnodes 16 --node-rank 3 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-4: p5.48xlarge, global ranks 32-39, stage 2
  4) torchrun --nnodes 16 --node-rank 4 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-5: p5.48xlarge, global ranks 40-47, stage 2
  5) torchrun --nnodes 16 --node-rank 5 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-6: p5.48xlarge, global ranks 48-55, stage 3
  6) torchrun --nnodes 16 --node-rank 6 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p5-48xlarge-7: p5.48xlarge, global ranks 56-63, stage 3
  7) torchrun --nnodes 16 --node-rank 7 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-0: p4d.24xlarge, global ranks 64-71, stage 4
  8) torchrun --nnodes 16 --node-rank 8 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-1: p4d.24xlarge, global ranks 72-79, stage 4
  9) torchrun --nnodes 16 --node-rank 9 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-2: p4d.24xlarge, global ranks 80-87, stage 5
  10) torchrun --nnodes 16 --node-rank 10 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-3: p4d.24xlarge, global ranks 88-95, stage 5
  11) torchrun --nnodes 16 --node-rank 11 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-4: p4d.24xlarge, global ranks 96-103, stage 6
  12) torchrun --nnodes 16 --node-rank 12 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-5: p4d.24xlarge, global ranks 104-111, stage 6
  13) torchrun --nnodes 16 --node-rank 13 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-6: p4d.24xlarge, global ranks 112-119, stage 7
  14) torchrun --nnodes 16 --node-rank 14 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # p4d-24xlarge-7: p4d.24xlarge, global ranks 120-127, stage 7
  15) torchrun --nnodes 16 --node-rank 15 --nproc-per-node 8 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  *) echo "torchrun.sh: node rank $NODE_RANK: this plan has node ranks 0..15" >&2; exit 2 ;;
esac
