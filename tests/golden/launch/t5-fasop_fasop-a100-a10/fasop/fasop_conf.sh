# FASOP fork settings for t5-fasop on fasop-a100-a10: tp 1, dp 4, pp 4, micro-batch 1, stages 12-12-12-12
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh; its run script passes them on as
# FASOP_ARGS below. Model, data and precision arguments stay as the fork's scripts set them.
GLOBAL_BATCH_SIZE=128
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=1
DP_SIZE=4
PIPELINE_MP_SIZE=4
PARTITION="12-12-12-12"
# encoder-decoder: the fork ignores PARTITION here; stages below the split rank run the encoder
PIPELINE_MODEL_PARALLEL_SPLIT_RANK=2
NNODES=4
WORLD_SIZE=16
FASOP_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 4
  --micro-batch-size 1
  --global-batch-size 128
  --pipeline-model-parallel-split-rank 2
)
