# FASOP fork settings for t5-fasop on fasop-a10: tp 4, dp 8, pp 1, micro-batch 1, stages 48
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh (set them there: its if-block on MODEL
# sets HIDDEN_SIZE and NUM_LAYERS); its run script _01_run_inter.sh passes the model's arguments and
# --balance $PARTITION; FASOP_ARGS below lists every parallel argument the plan needs.
# note: ffn width: the fork's run script builds MODEL=T5 with ffn 3072, this plan was priced with t5-fasop's 4096; edit --ffn-hidden-size in _01_run_inter.sh to run what was priced
# Node order (the fork has no flag for it; its Slurm scripts fix it):
#   node ranks 0-7: 8 x a10 (_02_homo_job.sh, --nodes=8), stage 0
HOMOGENEOUS_CLUSTER=true
MODEL=T5
NPROC_PER_NODE=4
NNODES=8
WORLD_SIZE=32
GLOBAL_BATCH_SIZE=128
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=4
DP_SIZE=8
PIPELINE_MP_SIZE=1
PARTITION="48"
ZERO=false
FASOP_ARGS=(
  --tensor-model-parallel-size 4
  --pipeline-model-parallel-size 1
  --micro-batch-size 1
  --global-batch-size 128
  --balance 48
  --sequence-parallel
)
