"""optsearch: provably optimal parallel-training plans for Megatron-LM on heterogeneous GPU clusters."""

__version__ = "0.1.0"
