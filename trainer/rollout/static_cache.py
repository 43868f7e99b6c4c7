"""Fast batched decoding for Llama-family models (Qwen2, Qwen3, Llama) on their own HF modules.

transformers' `generate` spends most of a decode step outside the GPU: a growing DynamicCache
(one `torch.cat` per layer per step), attention-mask rebuilding and logits processors, one
small kernel at a time. Here the model's own embedding, linear layers, rotary tables and
norm weights run over a KV cache allocated once for the whole generation, with the
element-wise work (norms, rotary, SiLU, softmax) as `decode_ops` functions; attention is
two batched matmuls over the cache (grouped-query heads without repeating K/V). On CUDA the
whole decode step, its element-wise ops fused by torch.compile, is captured as a CUDA graph
and replayed, so a step costs what its kernels cost. There is one graph per attention span
(a multiple of SLOT_BUCKET slots), so a step reads only the part of the cache that is
filled so far, not all of it.

Layout: prompts are left-padded to a common length P; the cache slot of a token is its column
in that padded layout, the same for every row; a row's rotary position is its slot minus its
padding. Slots before a row's padding end are masked out; a padding query attends to itself
only, which keeps its (unused) values finite.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.rollout.decode_ops import DecodeOps

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")
SLOT_BUCKET = 128  # cache widths are rounded up to this, so graphs are reused across batches


def supports(model: torch.nn.Module) -> bool:
    """True for full-attention Llama-family models whose modules this decoder knows."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (
        config.model_type in SUPPORTED_MODEL_TYPES
        and all(kind == "full_attention" for kind in layer_types)
        and getattr(config, "hidden_act", None) == "silu"
        and hasattr(model, "model")
        and hasattr(model.model, "rotary_emb")
    )


def _attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    softmax: Callable[..., torch.Tensor],
) -> torch.Tensor:
    """q (R, H, T, D), keys/values (R, KV, S, D), mask (R, 1, T, S) bool -> (R, H, T, D).

    Query head h reads KV head h // (H // KV), as transformers' repeat_kv does; grouping the
    query heads per KV head turns that into a plain batched matmul.
    """
    rows, heads, steps, dim = q.shape
    kv_heads, width = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    grouped = q.reshape(rows, kv_heads, group * steps, dim)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).view(rows, kv_heads, group, steps, width)
    probs = softmax(scores, mask.unsqueeze(2), scale, values.dtype).view(
        rows, kv_heads, group * steps, width
    )
    return torch.matmul(probs, values).view(rows, heads, steps, dim)


def _norm_args(norm: torch.nn.Module) -> tuple[torch.Tensor, float]:
    return norm.weight, norm.variance_epsilon


@dataclass
class _DecodeGraphs:
    """Decode steps captured for one (rows, width) cache: one graph per attention span (a
    multiple of SLOT_BUCKET), so early steps do not read the empty end of the cache. The
    graphs share the cache, the input buffers, the output buffer and one memory pool; they
    run one after another on one stream, never concurrently, which makes sharing safe."""

    tokens: torch.Tensor  # (R, 1)
    slot: torch.Tensor  # (1,)
    pad: torch.Tensor  # (R, 1)
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    logits: torch.Tensor  # (R, V) float32, written by every graph
    by_span: dict[int, torch.cuda.CUDAGraph] = field(default_factory=dict)
    pool: Any = None


class StaticCacheDecoder:
    """prefill(prompts, n, max_new) then decode(tokens) step by step; one generation at a time."""

    def __init__(
        self,
        model: torch.nn.Module,
        pad_token_id: int,
        cuda_graphs: bool = True,
        prefill_rows: int = 32,
        fused_ops: bool = True,
    ):
        if not supports(model):
            raise ValueError(
                f"static-cache decoding does not support model_type {model.config.model_type!r}"
            )
        self.model, self.inner = model, model.model
        self.layers = list(self.inner.layers)
        attention = self.layers[0].self_attn
        self.head_dim, self.scale = attention.head_dim, attention.scaling
        self.kv_heads = model.config.num_key_value_heads
        self.pad_token_id = pad_token_id
        self.prefill_rows = prefill_rows
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        # Graph-captured decode steps run compiled ops; prefill (shapes vary with every batch)
        # and eager decoding run the plain functions.
        self.eager_ops = DecodeOps.eager()
        self.graph_ops = DecodeOps.compiled() if fused_ops and self.cuda_graphs else self.eager_ops
        self._graphs: OrderedDict[tuple[int, int], _DecodeGraphs] = OrderedDict()
        self._state: dict = {}

    # -- the model, on our cache -------------------------------------------------------------

    def _forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        mask: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        attend: int,
        ops: DecodeOps,
    ) -> torch.Tensor:
        """Run tokens (R, T) at cache `slots` (T,), attending over the first `attend` slots; last
        logits.

        The layer's own linear modules and weights, with its norms, rotary, SiLU and softmax
        as `ops` (each residual add fused with the norm after it)."""
        rows, steps = tokens.shape
        residual = self.inner.embed_tokens(tokens)
        cos, sin = self.inner.rotary_emb(residual, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x = ops.rms_norm(residual, *_norm_args(self.layers[0].input_layernorm))
        for index, (layer, layer_keys, layer_values) in enumerate(zip(self.layers, keys, values)):
            attention, mlp = layer.self_attn, layer.mlp
            q = attention.q_proj(x).view(rows, steps, -1, self.head_dim)
            k = attention.k_proj(x).view(rows, steps, -1, self.head_dim)
            v = attention.v_proj(x).view(rows, steps, -1, self.head_dim).transpose(1, 2)
            if hasattr(attention, "q_norm"):  # Qwen3
                q, k = (
                    ops.rms_norm(q, *_norm_args(attention.q_norm)),
                    ops.rms_norm(k, *_norm_args(attention.k_norm)),
                )
            q, k = ops.rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            layer_keys.index_copy_(2, slots, k.to(layer_keys.dtype))
            layer_values.index_copy_(2, slots, v.to(layer_values.dtype))
            out = _attend(
                q,
                layer_keys[:, :, :attend],
                layer_values[:, :, :attend],
                mask,
                self.scale,
                ops.masked_softmax,
            )
            attended = attention.o_proj(out.transpose(1, 2).reshape(rows, steps, -1))
            residual, x = ops.add_rms_norm(
                residual, attended, *_norm_args(layer.post_attention_layernorm)
            )
            following = (
                self.layers[index + 1].input_layernorm
                if index + 1 < len(self.layers)
                else self.inner.norm
            )
            mlp_out = mlp.down_proj(ops.silu_mul(mlp.gate_proj(x), mlp.up_proj(x)))
            residual, x = ops.add_rms_norm(residual, mlp_out, *_norm_args(following))
        return self.model.lm_head(x[:, -1]).float()

    def _decode_step(
        self, tokens, slot, pad, keys, values, attend: int, ops: DecodeOps
    ) -> torch.Tensor:
        """One token per row at cache slot `slot` (a device tensor, so a graph can replay it)."""
        columns = torch.arange(attend, device=tokens.device)
        mask = ((columns >= pad) & (columns <= slot)).view(tokens.shape[0], 1, 1, attend)
        positions = (slot - pad).clamp(min=0)
        return self._forward(tokens, positions, slot, mask, keys, values, attend, ops)

    # -- cache and graphs --------------------------------------------------------------------

    def _new_cache(self, rows: int, width: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        shape = (rows, self.kv_heads, width, self.head_dim)

        def make() -> list[torch.Tensor]:
            return [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

        return make(), make()

    def _graphs_for(self, rows: int, width: int) -> _DecodeGraphs:
        key = (rows, width)
        if key in self._graphs:
            self._graphs.move_to_end(key)
            return self._graphs[key]
        while (
            len(self._graphs) >= 2
        ):  # train and validation shapes; older ones give their memory back
            self._graphs.popitem(last=False)
        keys, values = self._new_cache(rows, width)
        self._graphs[key] = _DecodeGraphs(
            tokens=torch.zeros((rows, 1), dtype=torch.long, device=self.device),
            slot=torch.zeros((1,), dtype=torch.long, device=self.device),
            pad=torch.zeros((rows, 1), dtype=torch.long, device=self.device),
            keys=keys,
            values=values,
            logits=torch.empty(
                (rows, self.model.config.vocab_size), dtype=torch.float32, device=self.device
            ),
        )
        return self._graphs[key]

    def _capture(self, graphs: _DecodeGraphs, span: int) -> torch.cuda.CUDAGraph:
        """Capture the decode step over the first `span` slots. Its warm-up runs write the
        current token's keys and values, as the replay that follows will: harmless."""

        def step() -> None:
            graphs.logits.copy_(
                self._decode_step(
                    graphs.tokens,
                    graphs.slot,
                    graphs.pad,
                    graphs.keys,
                    graphs.values,
                    span,
                    self.graph_ops,
                )
            )

        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the graph: lazy inits, cuBLAS workspaces
                step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=graphs.pool):
            step()
        graphs.pool = graphs.pool if graphs.pool is not None else graph.pool()
        graphs.by_span[span] = graph
        return graph

    def _graph_off(self, err: RuntimeError) -> None:
        """A capture failure costs speed, never the run: decode eagerly from now on."""
        warnings.warn(
            f"rollout: CUDA graph capture failed, decoding eagerly from now on ({err})",
            stacklevel=2,
        )
        self.cuda_graphs = False
        self._graphs.clear()

    def release(self) -> None:
        """Drop graphs, caches and generation state (after a weight update nothing needs recapture:
        graphs read the parameters in place; this is for freeing memory)."""
        self._graphs.clear()
        self._state = {}

    # -- generation --------------------------------------------------------------------------

    def prefill(self, prompts: list[list[int]], n: int, max_new_tokens: int) -> torch.Tensor:
        """Fill the cache with the prompts (each to be continued n times); next-token logits (B*n,
        V)."""
        count, longest = len(prompts), max(len(p) for p in prompts)
        rows = count * n
        width = -(-(longest + max_new_tokens) // SLOT_BUCKET) * SLOT_BUCKET
        pad = torch.tensor([longest - len(p) for p in prompts], device=self.device)
        padded = torch.full(
            (count, longest), self.pad_token_id, dtype=torch.long, device=self.device
        )
        for row, prompt in enumerate(prompts):
            padded[row, longest - len(prompt) :] = torch.tensor(
                prompt, dtype=torch.long, device=self.device
            )
        graphs = self._graphs_for(rows, width) if self.cuda_graphs else None
        if graphs is not None:
            keys, values = graphs.keys, graphs.values
            graphs.pad.copy_(pad.repeat_interleave(n).unsqueeze(1))
        else:
            keys, values = self._new_cache(rows, width)
        logits = []
        columns = torch.arange(longest, device=self.device)
        causal = columns[None, :] <= columns[:, None]
        for start in range(0, count, self.prefill_rows):
            stop = min(count, start + self.prefill_rows)
            chunk_pad = pad[start:stop, None, None]
            mask = (
                causal
                & (
                    (columns >= chunk_pad)
                    | torch.eye(longest, dtype=torch.bool, device=self.device)
                )
            ).unsqueeze(1)
            positions = (columns[None, :] - pad[start:stop, None]).clamp(min=0)
            chunk_keys, chunk_values = self._new_cache(stop - start, longest)
            logits.append(
                self._forward(
                    padded[start:stop],
                    positions,
                    columns,
                    mask,
                    chunk_keys,
                    chunk_values,
                    longest,
                    self.eager_ops,
                )
            )
            for cache, chunk in zip(keys + values, chunk_keys + chunk_values):
                grouped = cache.view(count, n, *cache.shape[1:])
                grouped[start:stop, :, :, :longest] = chunk.unsqueeze(1)
        self._state = dict(
            graphs=graphs,
            keys=keys,
            values=values,
            width=width,
            next_slot=longest,
            pad=pad.repeat_interleave(n).unsqueeze(1),
        )
        return torch.cat(logits).repeat_interleave(n, dim=0)

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row (R,), return the next-token logits (R, V)."""
        state = self._state
        slot_index = state["next_slot"]
        if slot_index >= state["width"]:
            raise RuntimeError("static cache is full: decode called more than max_new_tokens times")
        state["next_slot"] += 1
        graphs = state["graphs"] if self.cuda_graphs else None
        if graphs is not None:
            graphs.tokens.copy_(tokens.view(-1, 1))
            graphs.slot.fill_(slot_index)
            span = min(state["width"], -(-(slot_index + 1) // SLOT_BUCKET) * SLOT_BUCKET)
            try:
                graph = graphs.by_span.get(span) or self._capture(graphs, span)
            except RuntimeError as err:
                self._graph_off(err)
            else:
                graph.replay()
                return graphs.logits
        slot = torch.tensor([slot_index], device=self.device)
        return self._decode_step(
            tokens.view(-1, 1),
            slot,
            state["pad"],
            state["keys"],
            state["values"],
            slot_index + 1,
            self.eager_ops,
        )
