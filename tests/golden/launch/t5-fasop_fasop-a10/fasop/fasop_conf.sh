# FASOP fork settings for t5-fasop on fasop-a10: tp 4, dp 8, pp 1, micro-batch 1, stages 48
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh; its run script passes them on as
# FASOP_ARGS below. Model, data and precision arguments stay as the fork's scripts set them.
GLOBAL_BATCH_SIZE=128
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=4
DP_SIZE=8
PIPELINE_MP_SIZE=1
PARTITION="48"
NNODES=8
WORLD_SIZE=32
FASOP_ARGS=(
  --tensor-model-parallel-size 4
  --pipeline-model-parallel-size 1
  --micro-batch-size 1
  --global-batch-size 128
  --balance 48
)
