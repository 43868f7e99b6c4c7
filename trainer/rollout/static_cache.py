"""Fast batched decoding for Llama-family models (Qwen2, Qwen3, Llama) on their own HF modules.

transformers' `generate` spends most of a decode step outside the GPU: a growing DynamicCache
(one `torch.cat` per layer per step), attention-mask rebuilding and logits processors, one
small kernel at a time. Here the model's own embedding, linear layers, rotary tables and
norm weights run over a KV cache allocated once for the whole generation, with the
element-wise work (norms, rotary, SiLU, softmax) as `decode_ops` functions; attention is
two batched matmuls over the cache (grouped-query heads without repeating K/V). On CUDA the
whole decode step, its element-wise ops fused by torch.compile (SiLU-times-up, and rotary
with the cache writes, by Triton kernels where they work: TRITON_OPS), is captured as a
CUDA graph and replayed, so a step costs what its kernels cost. There is one graph per
attention span (a multiple of SLOT_BUCKET slots), so a step reads only the part of the cache that is
filled so far, not all of it. Where a decode attention kernel works (CUDA, fp16/bf16:
`split_kv`'s Triton kernel, else FlashAttention-2; `flash_decode` checks each once against
the matmul attention), decode steps attend with it instead, reading each row's filled slots
alone (so one graph covers every span); the cache is then laid out (rows, width, kv_heads,
dim), else (rows, kv_heads, width, dim).
The prefill always uses the matmul attention, over its own small cache per chunk of rows
(PREFILL_TOKENS padded tokens a chunk).
A layer's q/k/v projections run as one matmul, and its gate/up projections as another
(`fused_linear`: the modules' weights become views of one buffer); the lm_head writes the
step's logits straight into the graph's output buffer.

Layout: prompts are left-padded to a common length P; the cache slot of a token is its column
in that padded layout, the same for every row; a row's rotary position is its slot minus its
padding. Slots before a row's padding end are masked out; a padding query attends to itself
only, which keeps its (unused) values finite.

Rows that have ended stop costing decode time: `keep_rows` moves the rows still generating to
the front of the cache (their filled slots only) and later steps decode that prefix alone. The
prefix is a view of the same buffers, so it needs no new memory, and its graphs, one per
(row count, span), share the buffers and the memory pool of the full batch's graphs.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from trainer.rollout import flash_decode
from trainer.rollout.decode_ops import DecodeOps
from trainer.rollout.fused_linear import FusedLinear

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")
SLOT_BUCKET = 128  # cache widths are rounded up to this, so graphs are reused across batches
ATTENTIONS = ("auto", *flash_decode.KERNELS, "matmul")
# Padded prompt tokens per prefill chunk. Its matmul attention holds (rows, heads, T, T) fp32
# scores, so a chunk's rows shrink as prompts grow (at 12 heads: 201 MB of scores for 256
# rows of 128 tokens, 3.2 GB for 16 rows of 2,048); short prompts go in few chunks, each a
# pass of hundreds of kernel launches over the layers (bench/prefill_chunks.py).
PREFILL_TOKENS = 32768
# (DecodeOps field, module of trainer.rollout with a Triton kernel of that name and a check)
TRITON_OPS = (("silu_mul", "silu_kernel"), ("rotary_store", "rotary_kernel"))


def supports(model: torch.nn.Module) -> bool:
    """True for full-attention Llama-family models whose modules this decoder knows."""
    return unsupported(model) is None


def unsupported(model: torch.nn.Module) -> str | None:
    """What of `model` this decoder cannot run, naming the config key (a family it decodes
    may still have a sliding layer or another activation); None where it can run it."""
    config: Any = model.config  # torch types a module's attributes as Tensor | Module
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {config.model_type!r} (only {', '.join(SUPPORTED_MODEL_TYPES)})"
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    other = sorted({kind for kind in layer_types if kind != "full_attention"})
    if other:
        return f"layer_types {', '.join(other)} (only full_attention layers)"
    activation = getattr(config, "hidden_act", None)
    if activation != "silu":
        return f"hidden_act {activation!r} (only silu)"
    if not hasattr(model, "model") or not hasattr(model.model, "rotary_emb"):
        return f"{type(model).__name__} without model.rotary_emb"
    return None


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


def _matmul_attention(
    slots: torch.Tensor, mask: torch.Tensor, span: int, scale: float, ops: DecodeOps
) -> flash_decode.AttentionFn:
    """Attention over a (R, KV, W, D) cache: rotary on q and k, write the keys and values of
    the tokens at cache `slots` (T,), then attend over the first `span` slots where `mask`
    (R, 1, T, span) allows."""

    def run(q, k, v, cos, sin, layer_keys, layer_values) -> torch.Tensor:
        q, k = ops.rotary(q, k, cos, sin)
        layer_keys.index_copy_(2, slots, k.to(layer_keys.dtype))
        layer_values.index_copy_(2, slots, v.to(layer_values.dtype))
        return _attend(
            q, layer_keys[:, :, :span], layer_values[:, :, :span], mask, scale, ops.masked_softmax
        )

    return run


def _norm_args(norm: torch.nn.Module) -> tuple[torch.Tensor, float]:
    return cast(torch.Tensor, norm.weight), cast(float, norm.variance_epsilon)


@dataclass
class _DecodeGraphs:
    """Decode steps captured for one (rows, width) cache: one graph per attention span (a
    multiple of SLOT_BUCKET), so early steps do not read the empty end of the cache, and per
    row count (a prefix of the rows, after `keep_rows`). The graphs share the cache, the input
    buffers, the output buffer and one memory pool; they run one after another on one stream,
    never concurrently, which makes sharing safe."""

    tokens: torch.Tensor  # (R, 1)
    slot: torch.Tensor  # (1,)
    pad: torch.Tensor  # (R, 1)
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    logits: torch.Tensor  # (R, V) in the decoder's logits dtype, written by every graph
    by_shape: dict[tuple[int, int], torch.cuda.CUDAGraph] = field(
        default_factory=dict
    )  # rows, span
    pool: Any = None


class StaticCacheDecoder:
    """prefill(prompts, n, max_new) then decode(tokens) step by step; one generation at a time."""

    def __init__(
        self,
        model: torch.nn.Module,
        pad_token_id: int,
        cuda_graphs: bool = True,
        prefill_tokens: int = PREFILL_TOKENS,
        fused_ops: bool = True,
        attention: str = "auto",
        float_logits: bool = True,
    ):
        """`float_logits`: hand logits back in fp32 (else in the model's dtype, sparing the
        fp32 copy of (rows, vocab) per step, for a sampler that upcasts them itself)."""
        if attention not in ATTENTIONS:
            raise ValueError(
                f"rollout attention {attention!r} is not one of {', '.join(ATTENTIONS)}"
            )
        config: Any = model.config
        reason = unsupported(model)
        if reason is not None:
            raise ValueError(
                f"static-cache decoding does not support {reason}; decoder='auto' picks the"
                " dynamic decoder for it"
            )
        # transformers' submodules (model.layers[i].self_attn...) are plain attributes, which
        # torch types as Tensor | Module: Any says what is known
        self.model: Any = model
        self.inner: Any = cast(Any, model.model)
        self.layers: list[Any] = list(self.inner.layers)
        first_attention = self.layers[0].self_attn
        self.head_dim, self.scale = first_attention.head_dim, first_attention.scaling
        self.kv_heads: int = config.num_key_value_heads
        self.pad_token_id = pad_token_id
        self.prefill_tokens = prefill_tokens
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.logits_dtype = torch.float32 if float_logits else self.dtype
        self.cuda_graphs = cuda_graphs and self.device.type == "cuda"
        # Graph-captured decode steps and, with them, the prefill run compiled ops (the prefill
        # is as many small kernels per layer as a decode step, over a prompt's tokens; its shapes
        # vary per batch, which torch.compile's default makes dynamic at the second one);
        # eager decoding runs the plain functions.
        self.eager_ops = DecodeOps.eager()
        self.graph_ops = self._graph_ops() if fused_ops and self.cuda_graphs else self.eager_ops
        self._graphs: OrderedDict[tuple[int, int], _DecodeGraphs] = OrderedDict()
        self._state: dict = {}
        self.kernel = self._decode_kernel(attention)
        # the decode kernels read a (rows, width, kv_heads, dim) cache; the matmul attention a
        # (rows, kv_heads, width, dim) one
        self.slots_first = self.kernel != "matmul"
        self._fused = self._fuse()

    def _graph_ops(self) -> DecodeOps:
        """The compiled ops, with each of TRITON_OPS's kernels in its op's place where the
        kernel's check passes here (each is faster than the compiled op; see its module)."""
        kernels: dict[str, Callable[..., Any]] = {}
        for op, module_name in TRITON_OPS:
            try:  # Triton: imported where it is used
                module = importlib.import_module(f"trainer.rollout.{module_name}")
            except ImportError as err:
                why_not = str(err)
            else:
                why_not = module.check(self.device, self.dtype)
            if why_not is None:
                kernels[op] = getattr(module, op)
            else:
                warnings.warn(f"rollout: the compiled {op} stays ({why_not})", stacklevel=3)
        return dataclasses.replace(DecodeOps.compiled(), **kernels)

    def _fuse(self) -> list[tuple[FusedLinear | None, FusedLinear | None]]:
        """Per layer, its q/k/v and its gate/up projections fused (None where they differ)."""
        fused = []
        for layer in self.layers:
            attention, mlp = layer.self_attn, layer.mlp
            groups = (
                [attention.q_proj, attention.k_proj, attention.v_proj],
                [mlp.gate_proj, mlp.up_proj],
            )
            fused.append((FusedLinear.of(groups[0]), FusedLinear.of(groups[1])))
        return fused

    def _refuse_if_broken(self) -> None:
        """Fuse again where a parameter no longer lives in its fused buffer (see fused_linear);
        captured graphs read the old buffers, so they go too."""
        if not all(f.intact() for pair in self._fused for f in pair if f is not None):
            self._fused = self._fuse()
            self._graphs.clear()

    def _decode_kernel(self, attention: str) -> str:
        """The decode attention: `attention` where asked for by name, else ("auto") the first
        of flash_decode.KERNELS whose self-check passes here, else the matmul attention."""
        if attention != "auto":
            return attention
        if self.device.type != "cuda" or self.dtype not in (torch.float16, torch.bfloat16):
            return "matmul"
        config = self.model.config
        reasons = []
        for kernel in flash_decode.KERNELS:
            why_not = flash_decode.check(
                self.device,
                self.dtype,
                config.num_attention_heads,
                self.kv_heads,
                self.head_dim,
                lambda q, keys, values, mask: _attend(
                    q, keys, values, mask, self.head_dim**-0.5, self.eager_ops.masked_softmax
                ),
                kernel,
            )
            if why_not is None:
                return kernel
            reasons.append(f"{kernel}: {why_not}")
        warnings.warn(
            f"rollout: decoding with matmul attention ({'; '.join(reasons)})", stacklevel=2
        )
        return "matmul"

    # -- the model, on our cache -------------------------------------------------------------

    def _forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        attention: flash_decode.AttentionFn,
        ops: DecodeOps,
        logits_out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run tokens (R, T) at rotary `positions`, `attention` storing each layer's keys and
        values in its cache and attending; the last token's logits, in the model's dtype (a
        graph's copy into its fp32 buffer converts them in the same pass). Where `logits_out`
        has that dtype, the lm_head matmul writes into it and returns it: a decode graph's
        buffer needs no copy of (rows, vocab) logits then.

        The layer's own linear modules and weights, with its norms, rotary, SiLU and softmax
        as `ops` (each residual add fused with the norm after it)."""
        rows, steps = tokens.shape
        residual = self.inner.embed_tokens(tokens)
        cos, sin = self.inner.rotary_emb(residual, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x = ops.rms_norm(residual, *_norm_args(self.layers[0].input_layernorm))
        for index, (layer, layer_keys, layer_values, (qkv, gate_up)) in enumerate(
            zip(self.layers, keys, values, self._fused)
        ):
            projections, mlp = layer.self_attn, layer.mlp
            if qkv is not None:
                q, k, v = qkv(x)
            else:
                q, k, v = projections.q_proj(x), projections.k_proj(x), projections.v_proj(x)
            q = q.view(rows, steps, -1, self.head_dim)
            k = k.view(rows, steps, -1, self.head_dim)
            v = v.view(rows, steps, -1, self.head_dim).transpose(1, 2)
            if hasattr(projections, "q_norm"):  # Qwen3
                q, k = (
                    ops.rms_norm(q, *_norm_args(projections.q_norm)),
                    ops.rms_norm(k, *_norm_args(projections.k_norm)),
                )
            out = attention(
                q.transpose(1, 2), k.transpose(1, 2), v, cos, sin, layer_keys, layer_values
            )
            attended = projections.o_proj(out.transpose(1, 2).reshape(rows, steps, -1))
            residual, x = ops.add_rms_norm(
                residual, attended, *_norm_args(layer.post_attention_layernorm)
            )
            following = (
                self.layers[index + 1].input_layernorm
                if index + 1 < len(self.layers)
                else self.inner.norm
            )
            gate, up = gate_up(x) if gate_up is not None else (mlp.gate_proj(x), mlp.up_proj(x))
            mlp_out = mlp.down_proj(ops.silu_mul(gate, up))
            residual, x = ops.add_rms_norm(residual, mlp_out, *_norm_args(following))
        head = self.model.lm_head
        if logits_out is not None and logits_out.dtype == x.dtype and head.bias is None:
            return torch.mm(x[:, -1], head.weight.t(), out=logits_out)
        return head(x[:, -1])

    def _decode_step(
        self,
        tokens,
        slot,
        pad,
        keys,
        values,
        attend: int,
        ops: DecodeOps,
        logits_out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One token per row at cache slot `slot` (a device tensor, so a graph can replay it);
        `logits_out` as `_forward`'s."""
        positions = (slot - pad).clamp(min=0)
        if self.slots_first:
            attention = flash_decode.build(
                self.kernel,
                slot,
                pad,
                keys[0].shape[1],
                self.scale,
                self.model.config.num_attention_heads // self.kv_heads,
                ops.rotary_store,
                ops.rotary_store_packed,
            )
        else:
            columns = torch.arange(attend, device=tokens.device)
            mask = ((columns >= pad) & (columns <= slot)).view(tokens.shape[0], 1, 1, attend)
            attention = _matmul_attention(slot, mask, attend, self.scale, ops)
        return self._forward(tokens, positions, keys, values, attention, ops, logits_out)

    # -- cache and graphs --------------------------------------------------------------------

    def _new_cache(
        self, rows: int, width: int, slots_first: bool = False, zeroed: bool = True
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per layer keys and values: (rows, width, kv_heads, dim) for the decode kernels
        (`slots_first`), else (rows, kv_heads, width, dim). Zeroed (the matmul attention
        multiplies every slot of its span by its weight, and a NaN left in an unused slot
        times a zero weight is still NaN), unless `zeroed` is False: for a prefill chunk's
        cache, whose every slot the chunk writes before reading it."""
        shape = (
            (rows, width, self.kv_heads, self.head_dim)
            if slots_first
            else (rows, self.kv_heads, width, self.head_dim)
        )
        new = torch.zeros if zeroed else torch.empty

        def make() -> list[torch.Tensor]:
            return [new(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

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
        keys, values = self._new_cache(rows, width, self.slots_first)
        self._graphs[key] = _DecodeGraphs(
            tokens=torch.zeros((rows, 1), dtype=torch.long, device=self.device),
            slot=torch.zeros((1,), dtype=torch.long, device=self.device),
            pad=torch.zeros((rows, 1), dtype=torch.long, device=self.device),
            keys=keys,
            values=values,
            logits=torch.empty(
                (rows, self.model.config.vocab_size), dtype=self.logits_dtype, device=self.device
            ),
        )
        return self._graphs[key]

    def _capture(self, graphs: _DecodeGraphs, rows: int, span: int) -> torch.cuda.CUDAGraph:
        """Capture the decode step of the first `rows` rows over the first `span` slots. Its
        warm-up runs write the current token's keys and values, as the replay that follows
        will: harmless."""

        def step() -> None:
            out = graphs.logits[:rows]
            logits = self._decode_step(
                graphs.tokens[:rows],
                graphs.slot,
                graphs.pad[:rows],
                [k[:rows] for k in graphs.keys],
                [v[:rows] for v in graphs.values],
                span,
                self.graph_ops,
                out,
            )
            if logits is not out:  # fp32 logits: the copy converts them
                out.copy_(logits)

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
        graphs.by_shape[rows, span] = graph
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
        """Fill the cache with the prompts (each to be continued n times); next-token logits
        (B*n, V)."""
        self._refuse_if_broken()
        count, longest = len(prompts), max(len(p) for p in prompts)
        rows = count * n
        width = -(-(longest + max_new_tokens) // SLOT_BUCKET) * SLOT_BUCKET
        pad = torch.tensor([longest - len(p) for p in prompts], device=self.device)
        padded = torch.full((count, longest), self.pad_token_id, dtype=torch.long)
        for row, prompt in enumerate(prompts):  # on the host, then one copy to the device
            padded[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        padded = padded.to(self.device)
        graphs = self._graphs_for(rows, width) if self.cuda_graphs else None
        if graphs is not None:
            keys, values = graphs.keys, graphs.values
            graphs.pad.copy_(pad.repeat_interleave(n).unsqueeze(1))
        else:
            keys, values = self._new_cache(rows, width, self.slots_first)
        logits = []
        ops = self.graph_ops if self.cuda_graphs else self.eager_ops
        columns = torch.arange(longest, device=self.device)
        causal = columns[None, :] <= columns[:, None]
        chunk_rows = max(1, self.prefill_tokens // longest)
        for start in range(0, count, chunk_rows):
            stop = min(count, start + chunk_rows)
            chunk_pad = pad[start:stop, None, None]
            mask = (
                causal
                & (
                    (columns >= chunk_pad)
                    | torch.eye(longest, dtype=torch.bool, device=self.device)
                )
            ).unsqueeze(1)
            positions = (columns[None, :] - pad[start:stop, None]).clamp(min=0)
            chunk_keys, chunk_values = self._new_cache(stop - start, longest, zeroed=False)
            logits.append(
                self._forward(
                    padded[start:stop],
                    positions,
                    chunk_keys,
                    chunk_values,
                    _matmul_attention(columns, mask, longest, self.scale, ops),
                    ops,
                )
            )
            for cache, chunk in zip(keys + values, chunk_keys + chunk_values):
                grouped = cache.view(count, n, *cache.shape[1:])
                if self.slots_first:
                    grouped[start:stop, :, :longest] = chunk.transpose(1, 2).unsqueeze(1)
                else:
                    grouped[start:stop, :, :, :longest] = chunk.unsqueeze(1)
        self._state = dict(
            graphs=graphs,
            keys=keys,
            values=values,
            width=width,
            next_slot=longest,
            pad=pad.repeat_interleave(n).unsqueeze(1),
            rows=rows,
        )
        return torch.cat(logits).to(self.logits_dtype).repeat_interleave(n, dim=0)

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row (R,), return the next-token logits (R, V)."""
        state = self._state
        slot_index = state["next_slot"]
        if slot_index >= state["width"]:
            raise RuntimeError("static cache is full: decode called more than max_new_tokens times")
        state["next_slot"] += 1
        rows = state["rows"]
        graphs = state["graphs"] if self.cuda_graphs else None
        if graphs is not None:
            graphs.tokens[:rows].copy_(tokens.view(-1, 1))
            graphs.slot.fill_(slot_index)
            # The decode kernels read each row's filled slots whatever the span: one graph per
            # row count does; the matmul attention reads the span, so it gets one per span.
            filled = -(-(slot_index + 1) // SLOT_BUCKET) * SLOT_BUCKET
            span = state["width"] if self.slots_first else min(state["width"], filled)
            try:
                graph = graphs.by_shape.get((rows, span)) or self._capture(graphs, rows, span)
            except RuntimeError as err:
                self._graph_off(err)
            else:
                graph.replay()
                return graphs.logits[:rows]
        slot = torch.tensor([slot_index], device=self.device)
        return self._decode_step(
            tokens.view(-1, 1),
            slot,
            state["pad"][:rows],
            [k[:rows] for k in state["keys"]],
            [v[:rows] for v in state["values"]],
            slot_index + 1,
            self.eager_ops,
        ).to(self.logits_dtype)

    def keep_rows(self, index: torch.Tensor) -> None:
        """Decode only the current rows at `index` from now on, in that order (the rows that are
        still generating, and any fillers that round their count up to a size whose graphs
        are reused). Their filled cache slots and padding move to the front of the buffers."""
        state = self._state
        kept, filled = len(index), state["next_slot"]
        for cache in state["keys"] + state["values"]:
            slots = cache.narrow(1 if self.slots_first else 2, 0, filled)
            slots[:kept] = slots[index]
        pads = [state["pad"]] + ([state["graphs"].pad] if state["graphs"] is not None else [])
        for pad in pads:
            pad[:kept] = pad[index]
        state["rows"] = kept
