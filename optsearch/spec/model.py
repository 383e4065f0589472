"""Model spec: the Transformer's shape, enough to count parameters, FLOPs, activations and messages."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, model_validator

from optsearch.spec.base import Spec
from optsearch.spec.job import JobSpec

DEFAULT_LAYER_KIND = "layer"
EMBEDDING_KIND = "embedding"
HEAD_KIND = "head"


class LayerKindSpec(Spec):
    name: str = Field(
        pattern=r"^[A-Za-z0-9_]+$",
        description="Profile key of this kind of transformer layer, e.g. 'encoder' or 'decoder'.",
    )
    num_layers: int = Field(gt=0, le=10_000, description="How many layers of this kind, consecutively, in model order.")
    cross_attention: bool = Field(
        default=False, description="Layer has a cross-attention block over the encoder output (T5 decoder)."
    )
    num_experts: int | None = Field(
        default=None, ge=2, le=100_000,
        description="Mixture of experts: the layer's MLP is this many expert MLPs behind a router (Megatron's "
                    "--num-experts); None: one dense MLP.",
    )
    moe_router_topk: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Experts each token is routed to (Megatron's --moe-router-topk); required with num_experts.",
    )
    moe_ffn_hidden_size: int | None = Field(
        default=None, gt=0, le=10_000_000,
        description="Inner width of one expert MLP (Megatron's --moe-ffn-hidden-size); default: the model's "
                    "ffn_hidden_size. Experts are gated (SwiGLU) when the model's MLP is.",
    )

    @model_validator(mode="after")
    def _not_reserved(self) -> "LayerKindSpec":
        if self.name in (EMBEDDING_KIND, HEAD_KIND):
            raise ValueError(f"'{self.name}' is reserved for the embedding / LM head profile keys")
        return self

    @model_validator(mode="after")
    def _experts_consistent(self) -> "LayerKindSpec":
        if self.num_experts is None:
            if self.moe_router_topk is not None or self.moe_ffn_hidden_size is not None:
                raise ValueError("moe_router_topk and moe_ffn_hidden_size need num_experts (a mixture-of-experts layer)")
            return self
        if self.moe_router_topk is None:
            raise ValueError(f"num_experts = {self.num_experts} needs moe_router_topk (experts per token)")
        if self.moe_router_topk > self.num_experts:
            raise ValueError(f"moe_router_topk = {self.moe_router_topk}: must be at most num_experts {self.num_experts}")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None


@lru_cache(maxsize=64)
def _one_kind(num_layers: int) -> tuple[LayerKindSpec, ...]:
    """ModelSpec.kinds of a model without layer_kinds: one kind of num_layers layers. Kept per num_layers (specs
    are frozen, so one instance serves every model of that depth): the cost model and the bounds read `kinds` about
    10^5 times in a large search, and building the spec each time (pydantic's validation) took 0.5-1 s of its CPU
    (round 12, timeload)."""
    return (LayerKindSpec(name=DEFAULT_LAYER_KIND, num_layers=num_layers),)


class ModelSpec(Spec):
    name: str = Field(min_length=1, description="Catalog name, e.g. 'gpt2-xl'.")
    description: str = Field(default="", description="One line for `optsearch catalog models`.")
    num_layers: int = Field(gt=0, le=10_000, description="Transformer layers in all (encoder + decoder for T5).")
    hidden_size: int = Field(gt=0, le=1_000_000, description="Model width h.")
    num_attention_heads: int = Field(gt=0, le=100_000, description="Attention (query) heads a.")
    num_kv_heads: int | None = Field(
        default=None, gt=0, le=100_000,
        description="Key/value heads for grouped-query attention; default = attention heads."
    )
    head_dim: int | None = Field(
        default=None, gt=0, le=100_000, description="Channels per head (T5's d_kv); default = hidden size / heads."
    )
    ffn_hidden_size: int = Field(gt=0, le=10_000_000, description="MLP inner width f.")
    gated_mlp: bool = Field(default=False, description="SwiGLU-style gated MLP (three f x h matrices).")
    seq_length: int = Field(gt=0, le=10_000_000, description="Training sequence length s in tokens.")
    vocab_size: int = Field(gt=0, le=100_000_000, description="Vocabulary size V (unpadded).")
    tied_embeddings: bool = Field(default=True, description="LM head shares the input embedding matrix.")
    position_embedding: Literal["learned", "rotary", "relative"] = Field(
        default="learned", description="Learned absolute positions add s x h parameters; rotary/relative add none."
    )
    bias: bool = Field(default=True, description="Linear layers carry biases (GPT, BERT) or not (Llama).")
    norm: Literal["layernorm", "rmsnorm"] = Field(
        default="layernorm", description="LayerNorm (weight+bias, 2h) or RMSNorm (weight, h)."
    )
    layer_kinds: list[LayerKindSpec] | None = Field(
        default=None,
        description="Kinds of layers in model order (T5: encoder then decoder). Default: one kind 'layer'.",
    )
    default_job: JobSpec = Field(description="Training job used unless the CLI overrides it.")
    published_parameters: float | None = Field(
        default=None, gt=0, le=1e16, description="Parameter count published for this model (checked by the tests)."
    )
    source: str = Field(default="", description="Where the shape comes from.")
    encoder_only: bool = Field(
        default=False,
        description="A bidirectional encoder trained by masked-language modelling (BERT), not a causal decoder: "
                    "upstream Megatron-LM runs it with examples/bert/pretrain_bert.py (no context parallelism), the "
                    "FASOP fork as MODEL=Bert. One kind of layer, no cross-attention.",
    )

    @model_validator(mode="after")
    def _consistent_shape(self) -> "ModelSpec":
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; give head_dim"
            )
        if self.num_attention_heads % self.kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} must be a multiple of num_kv_heads {self.kv_heads}"
            )
        if self.encoder_only and (len(self.kinds) != 1 or self.kinds[0].cross_attention):
            raise ValueError("encoder_only = true: an encoder-only model (BERT) has one kind of layer without "
                             "cross-attention; an encoder followed by a cross-attending decoder is encoder-decoder (T5)")
        if self.layer_kinds is not None:
            total = sum(k.num_layers for k in self.layer_kinds)
            if total != self.num_layers:
                raise ValueError(f"layer_kinds hold {total} layers but num_layers is {self.num_layers}")
            names = [k.name for k in self.layer_kinds]
            if len(set(names)) != len(names):
                raise ValueError(f"layer kind names must be unique, got {names}")
        return self

    # ---- derived shape -------------------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def channels_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def query_width(self) -> int:
        """heads x head_dim: width of Q and of the attention output."""
        return self.num_attention_heads * self.channels_per_head

    @property
    def kv_width(self) -> int:
        """kv_heads x head_dim: width of K and of V."""
        return self.kv_heads * self.channels_per_head

    @property
    def kinds(self) -> tuple[LayerKindSpec, ...]:
        if self.layer_kinds is None:
            return _one_kind(self.num_layers)
        return tuple(self.layer_kinds)

    def kind_of_layer(self, index: int) -> LayerKindSpec:
        """The kind of transformer layer number `index` (0-based, model order)."""
        for kind in self.kinds:
            if index < kind.num_layers:
                return kind
            index -= kind.num_layers
        raise IndexError(index)

    # ---- parameter counts ----------------------------------------------------------------------------------
    def norm_parameters(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden_size

    def attention_parameters(self) -> int:
        """Q, K, V and output projections (+ biases)."""
        h, q, kv = self.hidden_size, self.query_width, self.kv_width
        weights = h * q + 2 * h * kv + q * h
        biases = (q + 2 * kv + h) if self.bias else 0
        return weights + biases

    def mlp_parameters(self) -> int:
        h, f = self.hidden_size, self.ffn_hidden_size
        if self.gated_mlp:
            return 3 * h * f + ((2 * f + h) if self.bias else 0)
        return 2 * h * f + ((f + h) if self.bias else 0)

    def expert_ffn_size(self, kind: LayerKindSpec) -> int:
        """Inner width of one expert MLP of a mixture-of-experts kind (moe_ffn_hidden_size, else ffn_hidden_size)."""
        return kind.moe_ffn_hidden_size or self.ffn_hidden_size

    def expert_parameters(self, kind: LayerKindSpec) -> int:
        """Parameters of all experts of one layer (0 for a dense kind): E x (3 h f_e if gated else 2 h f_e) + biases.
        These are what expert parallelism divides over its ep ranks."""
        if not kind.is_moe:
            return 0
        h, f = self.hidden_size, self.expert_ffn_size(kind)
        one = (3 * h * f + ((2 * f + h) if self.bias else 0)) if self.gated_mlp else 2 * h * f + ((f + h) if self.bias else 0)
        return kind.num_experts * one

    def router_parameters(self, kind: LayerKindSpec) -> int:
        """The router's h x E matrix (no bias, as Megatron's TopKRouter); 0 for a dense kind."""
        return self.hidden_size * kind.num_experts if kind.is_moe else 0

    def layer_parameters(self, kind: LayerKindSpec) -> int:
        """Parameters of one transformer layer: attention + MLP (or router + all experts) + norms (+ cross-attention
        and its norm)."""
        mlp = self.router_parameters(kind) + self.expert_parameters(kind) if kind.is_moe else self.mlp_parameters()
        n = self.attention_parameters() + mlp + 2 * self.norm_parameters()
        if kind.cross_attention:
            n += self.attention_parameters() + self.norm_parameters()
        return n

    def embedding_parameters(self) -> int:
        """Word embedding (+ learned positions)."""
        n = self.vocab_size * self.hidden_size
        if self.position_embedding == "learned":
            n += self.seq_length * self.hidden_size
        return n

    def head_parameters(self) -> int:
        """Final norm + the output projection when it is not tied to the embedding."""
        return self.norm_parameters() + (0 if self.tied_embeddings else self.vocab_size * self.hidden_size)

    def parameter_count(self) -> int:
        """All parameters of the model, counted once (tied embeddings once)."""
        layers = sum(self.layer_parameters(k) * k.num_layers for k in self.kinds)
        return layers + self.embedding_parameters() + self.head_parameters()

    @property
    def is_moe(self) -> bool:
        """Some layer kind is a mixture of experts."""
        return any(k.is_moe for k in self.kinds)

    def active_parameter_count(self) -> int:
        """Parameters one token passes through: every expert layer counts only moe_router_topk of its experts."""
        inactive = sum(self.expert_parameters(k) // k.num_experts * (k.num_experts - k.moe_router_topk) * k.num_layers
                       for k in self.kinds if k.is_moe)
        return self.parameter_count() - inactive
