#!/usr/bin/env bash
# torchrun launch for t5-fasop on fasop-a10: tp 4, dp 8, pp 1, micro-batch 1, stages 48
# Run `bash torchrun.sh NODE_RANK [extra Megatron-LM args...]` on every node of the hostfile (its k-th host
# is node rank k). Megatron-LM orders ranks tp, then cp, then dp, then pp, so pipeline stage i runs on
# global ranks [32 i, 32 (i + 1)), and these node ranks put every stage on the node type the plan chose.
# Set MEGATRON_DIR to your Megatron-LM checkout and MASTER_ADDR to the host of node rank 0.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/megatron_args.sh"
MEGATRON_DIR="${MEGATRON_DIR:-.}"
if [ ! -f "$MEGATRON_DIR/$MEGATRON_ENTRY" ]; then
  echo "torchrun.sh: $MEGATRON_DIR/$MEGATRON_ENTRY not found (from $PWD): set MEGATRON_DIR to your Megatron-LM checkout" >&2
  exit 2
fi
MASTER_ADDR="${MASTER_ADDR:-a10-0}"
MASTER_PORT="${MASTER_PORT:-6000}"
export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM requires it with tp > 1 (before Blackwell)
NODE_RANK="${1:?usage: bash torchrun.sh NODE_RANK (0..7) [extra Megatron-LM args]}"
shift
case "$NODE_RANK" in
  # a10-0: a10, global ranks 0-3, stage 0
  0) torchrun --nnodes 8 --node-rank 0 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-1: a10, global ranks 4-7, stage 0
  1) torchrun --nnodes 8 --node-rank 1 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-2: a10, global ranks 8-11, stage 0
  2) torchrun --nnodes 8 --node-rank 2 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-3: a10, global ranks 12-15, stage 0
  3) torchrun --nnodes 8 --node-rank 3 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-4: a10, global ranks 16-19, stage 0
  4) torchrun --nnodes 8 --node-rank 4 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-5: a10, global ranks 20-23, stage 0
  5) torchrun --nnodes 8 --node-rank 5 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-6: a10, global ranks 24-27, stage 0
  6) torchrun --nnodes 8 --node-rank 6 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  # a10-7: a10, global ranks 28-31, stage 0
  7) torchrun --nnodes 8 --node-rank 7 --nproc-per-node 4 --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$MEGATRON_DIR/$MEGATRON_ENTRY" "${MEGATRON_ARGS[@]}" "$@" ;;
  *) echo "torchrun.sh: node rank $NODE_RANK: this plan has node ranks 0..7" >&2; exit 2 ;;
esac
