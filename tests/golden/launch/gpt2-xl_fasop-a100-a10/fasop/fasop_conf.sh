# FASOP fork settings for gpt2-xl on fasop-a100-a10: tp 1, dp 4, pp 8, micro-batch 1, stages 12-6-6-6-6-6-6-0
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh; its run script passes them on as
# FASOP_ARGS below. Model, data and precision arguments stay as the fork's scripts set them.
GLOBAL_BATCH_SIZE=64
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=1
DP_SIZE=4
PIPELINE_MP_SIZE=8
PARTITION="12-6-6-6-6-6-6-0"
NNODES=8
WORLD_SIZE=32
FASOP_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 8
  --micro-batch-size 1
  --global-batch-size 64
  --balance 12-6-6-6-6-6-6-0
)
