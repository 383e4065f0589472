# FASOP fork settings for gpt2-xl on fasop-a10: tp 1, dp 4, pp 8, micro-batch 1, stages 0-11-8-8-8-8-5-0
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh (set them there: its if-block on MODEL
# sets HIDDEN_SIZE and NUM_LAYERS); its run script _01_run_inter.sh passes the model's arguments and
# --balance $PARTITION; FASOP_ARGS below lists every parallel argument the plan needs.
# Node order (the fork has no flag for it; its Slurm scripts fix it):
#   node ranks 0-7: 8 x a10 (_02_homo_job.sh, --nodes=8), stages 0-7
HOMOGENEOUS_CLUSTER=true
MODEL=gpt2
NPROC_PER_NODE=4
NNODES=8
WORLD_SIZE=32
GLOBAL_BATCH_SIZE=64
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=1
DP_SIZE=4
PIPELINE_MP_SIZE=8
PARTITION="0-11-8-8-8-8-5-0"
ZERO=false
FASOP_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 8
  --micro-batch-size 1
  --global-batch-size 64
  --balance 0-11-8-8-8-8-5-0
)
