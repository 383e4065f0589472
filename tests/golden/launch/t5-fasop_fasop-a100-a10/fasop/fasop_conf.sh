# FASOP fork settings for t5-fasop on fasop-a100-a10: tp 1, dp 4, pp 4, micro-batch 1, stages 12-12-12-12
# Fork: github.com/AvatarHwang/FASOP, folder Megatron-LM-2 (a 2023 Megatron-LM fork with --balance).
# These are the variables of the fork's Megatron-LM-2/_00_conf.sh (set them there: its if-block on MODEL
# sets HIDDEN_SIZE and NUM_LAYERS); its run script _01_run_inter.sh passes the model's arguments and
# --balance $PARTITION; FASOP_ARGS below lists every parallel argument the plan needs.
# note: ffn width: the fork's run script builds MODEL=T5 with ffn 3072, this plan was priced with t5-fasop's 4096; edit --ffn-hidden-size in _01_run_inter.sh to run what was priced
# Node order (the fork has no flag for it; its Slurm scripts fix it):
#   node rank 0: 1 x a100 (_02_hetero_master_job.sh, --nodes=1), stage 0
#   node ranks 1-3: 3 x a10 (_02_hetero_slave_job.sh, --nodes=3), stages 1-3
HOMOGENEOUS_CLUSTER=false
MODEL=T5
NPROC_PER_NODE=4
NNODES=4
WORLD_SIZE=16
GLOBAL_BATCH_SIZE=128
MICRO_BATCH_SIZE=1
TENSOR_MP_SIZE=1
DP_SIZE=4
PIPELINE_MP_SIZE=4
PARTITION="12-12-12-12"
ZERO=false
# encoder-decoder: stages below the split rank run the encoder, each with its PARTITION entry
PIPELINE_MODEL_PARALLEL_SPLIT_RANK=2
FASOP_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 4
  --micro-batch-size 1
  --global-batch-size 128
  --balance 12-12-12-12
  --pipeline-model-parallel-split-rank 2
)
