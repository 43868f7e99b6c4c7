"""The `hf` rollout engine: transformers weights, batched KV-cache generation, no vLLM needed.

It keeps its own inference copy of the model (like a colocated vLLM does), so the actor can
stay sharded; `update_weights` copies the actor's gathered tensors into it in place. Decoding
uses `static_cache` (preallocated cache, CUDA graphs on GPU) for the Llama family and
`dynamic_cache` (the model's own forward) for everything else.

Rows that have ended (EOS) stop costing decode time: at every EOS check the engine drops them
from the decoded batch once the rows still generating fit in a smaller row bucket (a multiple
of 1/ROW_BUCKETS of the batch, so a generation needs at most ROW_BUCKETS row counts, and
their CUDA graphs are reused by the next generation). Dropping rows changes no row's result:
greedy tokens are the same, log-probs the same to float rounding (a matmul over fewer rows
may sum in another order), and a sampled row draws from the same random numbers
(`sample_next` draws for the whole batch), so a seed gives the same responses either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import torch

from trainer.rollout import static_cache
from trainer.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from trainer.rollout.dynamic_cache import DynamicCacheDecoder
from trainer.rollout.fused_sampling import TokenPicker

DECODERS = ("auto", "static", "dynamic")
EOS_CHECK_EVERY = 8  # steps between host syncs that stop early or drop ended rows
ROW_BUCKETS = 8  # the decoded row count is a multiple of 1/ROW_BUCKETS of the batch


class HFRolloutEngine(RolloutEngine):
    name = "hf"

    def __init__(
        self,
        model: torch.nn.Module,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        decoder: str = "auto",
        cuda_graphs: bool = True,
        max_num_seqs: int = 1024,
        fused_ops: bool = True,
        attention: str = "auto",
        fused_sampling: bool | None = None,
    ):
        """`fused_sampling`: pick each step's tokens and log-probs with one Triton kernel pass
        (see trainer/rollout/fused_sampling.py) rather than eager ops; None: on CUDA."""
        if decoder not in DECODERS:
            raise ValueError(f"rollout.hf.decoder {decoder!r} is not one of {', '.join(DECODERS)}")
        self.model: torch.nn.Module | None = model.eval()  # None once closed
        self.eos_token_ids = list(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.max_num_seqs = max_num_seqs
        self.device = next(model.parameters()).device
        fused = self.device.type == "cuda" if fused_sampling is None else fused_sampling
        self.pick = TokenPicker(fused)
        self.decoder: static_cache.StaticCacheDecoder | DynamicCacheDecoder
        if decoder == "static" or (decoder == "auto" and static_cache.supports(model)):
            self.decoder = static_cache.StaticCacheDecoder(
                model,
                pad_token_id,
                cuda_graphs=cuda_graphs,
                fused_ops=fused_ops,
                attention=attention,
                float_logits=not fused,  # the fused picker upcasts the logits itself
            )
        else:
            self.decoder = DynamicCacheDecoder(model, pad_token_id)
        # state_dict(keep_vars) names tied weights under both names (lm_head.weight and the
        # embedding).
        self._parameters = dict(model.state_dict(keep_vars=True))

    @classmethod
    def from_pretrained(
        cls, model_dir: str, dtype: torch.dtype, device: str | torch.device, **kwargs: Any
    ) -> HFRolloutEngine:
        """An engine over a Hugging Face model directory (weights on disk), for use outside
        training; `kwargs` are the constructor's options (`decoder`, `cuda_graphs`, ...). Its
        files are read as data: no code shipped with them runs, and weights are read from
        safetensors only, never unpickled (trainer/model_code.py)."""
        from transformers import AutoModelForCausalLM, GenerationConfig

        local: dict[str, Any]  # apart: test_model_code's audit reads `local = dict(...)`
        local = dict(local_files_only=True, trust_remote_code=False)
        # ignore below: transformers types PreTrainedModel.to (`@wraps(Module.to)`) as
        # wanting the model as its first argument
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=dtype, use_safetensors=True, **local
        ).to(device)  # type: ignore[arg-type]
        generation = GenerationConfig.from_pretrained(model_dir, **local)
        eos = (
            generation.eos_token_id
            if generation.eos_token_id is not None
            else model.config.eos_token_id
        )
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        pad = (
            generation.pad_token_id
            if generation.pad_token_id is not None
            else (eos_ids[0] if eos_ids else 0)
        )
        return cls(model, eos_ids, pad, **kwargs)

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        with torch.no_grad():
            for name, tensor in weights:
                target = self._parameters.get(name)
                if target is None:
                    raise KeyError(f"rollout weight update: the model has no parameter {name!r}")
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"rollout weight update: {name!r} has shape {tuple(tensor.shape)}, "
                        f"expected {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> RolloutBatch:
        token_lists = [list(p) for p in prompts]
        if any(len(p) == 0 for p in token_lists):
            raise ValueError("rollout: an empty prompt cannot be continued")
        generator = None
        if not params.greedy:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(
                params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
            )
        per_chunk = max(1, self.max_num_seqs // params.n)
        parts = [
            self._generate_chunk(token_lists[i : i + per_chunk], params, generator)
            for i in range(0, len(token_lists), per_chunk)
        ]
        return _concat(parts, self.pad_token_id, params.n)

    @torch.inference_mode()
    def _generate_chunk(
        self, prompts: list[list[int]], params: SamplingParams, generator
    ) -> RolloutBatch:
        """Decode `params.n` responses per prompt as one batch over a shared KV cache, every
        row `max_tokens` wide: a row that ended writes padding (mask 0) while it stays in the
        batch, so its response stops at its EOS. Ended rows are looked for only every
        EOS_CHECK_EVERY steps, since each look waits for the device; a look ends the loop
        when no row is generating, or shrinks the decoded rows to a bucket (module
        docstring)."""
        rows = len(prompts) * params.n
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=self.device)
        tokens = torch.full(
            (rows, params.max_tokens), self.pad_token_id, dtype=torch.long, device=self.device
        )
        mask = torch.zeros((rows, params.max_tokens), dtype=torch.long, device=self.device)
        logprobs = (
            torch.zeros((rows, params.max_tokens), dtype=torch.float32, device=self.device)
            if params.logprobs
            else None
        )
        finished = torch.zeros(rows, dtype=torch.bool, device=self.device)
        active = torch.arange(rows, device=self.device)  # the batch row each decoded row is
        logits = self.decoder.prefill(prompts, params.n, params.max_tokens)
        steps = 0
        for step in range(params.max_tokens):
            dropped = len(active) < rows
            chosen, picked = self.pick(logits, params, generator, active if dropped else None, rows)
            alive = ~finished[active]
            tokens[active, step] = torch.where(alive, chosen, self.pad_token_id)
            mask[active, step] = alive.long()
            if logprobs is not None:
                # picked log-probs come whenever params.logprobs asked for this buffer
                logprobs[active, step] = torch.where(alive, cast(torch.Tensor, picked), 0.0)
            finished[active] = ~alive | torch.isin(chosen, eos)
            steps = step + 1
            if steps == params.max_tokens:
                break
            if self.eos_token_ids and steps % EOS_CHECK_EVERY == 0:
                generating = int((~finished).sum())
                if generating == 0:
                    break
                keep = _kept_rows(finished[active], _row_bucket(generating, rows))
                if keep is not None:
                    self.decoder.keep_rows(keep)
                    active = active[keep]
            logits = self.decoder.decode(tokens[active, step])
        width = max(1, int(mask[:, :steps].sum(-1).max()))
        return RolloutBatch(
            response_ids=tokens[:, :width].cpu(),
            response_mask=mask[:, :width].cpu(),
            logprobs=logprobs[:, :width].cpu() if logprobs is not None else None,
            prompt_index=[i for i in range(len(prompts)) for _ in range(params.n)],
        )

    def close(self) -> None:
        self.decoder.release()
        self.model = None
        self._parameters = {}


def _row_bucket(generating: int, rows: int) -> int:
    """The decoded row count for `generating` live rows of a `rows`-row batch."""
    unit = -(-rows // ROW_BUCKETS)
    return -(-generating // unit) * unit


def _kept_rows(ended: torch.Tensor, bucket: int) -> torch.Tensor | None:
    """Which decoded rows to keep (None: all of them): every live one, topped up to `bucket`
    with ended ones, whose outputs are discarded (they write padding) but keep the count on a
    size whose graphs exist."""
    if bucket >= len(ended):
        return None
    return torch.argsort(ended.to(torch.int8), stable=True)[:bucket]


def _concat(parts: list[RolloutBatch], pad_token_id: int, n: int) -> RolloutBatch:
    """Join per-chunk batches (different widths), renumbering prompt indices."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.response_ids.shape[1] for p in parts)

    def widen(t: torch.Tensor, value) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    index, offset = [], 0
    for part in parts:
        index += [i + offset for i in part.prompt_index]
        offset += len(part.prompt_index) // n
    return RolloutBatch(
        response_ids=torch.cat([widen(p.response_ids, pad_token_id) for p in parts]),
        response_mask=torch.cat([widen(p.response_mask, 0) for p in parts]),
        # every chunk ran with the same params: all have log-probs or none has
        logprobs=torch.cat([widen(cast(torch.Tensor, p.logprobs), 0.0) for p in parts])
        if parts[0].logprobs is not None
        else None,
        prompt_index=index,
    )
