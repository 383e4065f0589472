# FASOP fork settings for llama2-70b on aws-p4d: tp 8, dp 2, pp 8, micro-batch 1, stages 7-11-11-11-11-11-11-7
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh; its run script passes them on as
# FASOP_ARGS below. Model, data and precision arguments stay as the fork's scripts set them.
GLOBAL_BATCH_SIZE=1024
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=8
DP_SIZE=2
PIPELINE_MP_SIZE=8
PARTITION="7-11-11-11-11-11-11-7"
NNODES=16
WORLD_SIZE=128
FASOP_ARGS=(
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 8
  --micro-batch-size 1
  --global-batch-size 1024
  --balance 7-11-11-11-11-11-11-7
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
)
