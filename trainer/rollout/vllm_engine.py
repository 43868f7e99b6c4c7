"""The `vllm` rollout engine: a vLLM `LLM` in this process, next to the actor (colocated).

In-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) the engine's worker is reachable directly, so a
weight push is a function call with the actor's gathered tensors (no IPC, no disk). After the
push: on CPU vLLM keeps a repacked copy of a tied lm_head that the reload does not refresh, so it
is repacked; and the prefix cache is reset, or blocks computed with the old weights would be
reused. One engine per process (tensor parallel 1): data-parallel ranks each own one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

import torch

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.errors import MfsdpError, MfsdpFailedError
from trainer.closing import close_all
from trainer.prerequisites import CPU_KV_CACHE_VARIABLE, DEFAULT_CPU_KV_CACHE_GIB
from trainer.rollout.base import RolloutBatch, RolloutEngine, SamplingParams, pack_responses

if TYPE_CHECKING:  # vLLM is imported where it is used
    from vllm import LLM
    from vllm.config.model import ModelDType
    from vllm.logprobs import Logprob


def vllm_available() -> bool:
    vllm_info_only_when_verbose()  # importing vLLM logs too
    try:
        import vllm  # noqa: F401
    except Exception:  # a broken install (e.g. mismatched torchvision) counts as absent
        return False
    return True


# The way on when vLLM cannot run a model: the transformers engine runs every model the
# trainer builds.
USE_HF = "use rollout.name=hf (the transformers engine)"


class VLLMRolloutError(MfsdpFailedError):
    """vLLM could not run the rollout (a shape its kernels lack, a failed generate): one
    line naming the engine and vLLM's reason, in place of vLLM's traceback. Every rank of
    a run meets it alike (each runs the same engine on the same model): rank 0 says it,
    the others exit without their copy of the line (`MfsdpError.every_rank`)."""

    every_rank = True

    @classmethod
    def of(cls, reason: str) -> VLLMRolloutError:
        return cls(
            f"rollout vllm (rollout.name=vllm, or auto where vLLM is installed): {reason}; {USE_HF}"
        )


_MAX_REASON_CHARS = 400  # vLLM's sentences run to ~250 characters (its KV cache refusal)
# where vLLM's memory refusals start their advice, which names its `LLM(...)` arguments, not
# the run's keys, and on CPU a knob that the KV cache size (`kv_cache_knob`) overrides
_VLLM_MEMORY_ADVICE = " Try increasing `gpu_memory_utilization`"


def vllm_reason(err: BaseException) -> str:
    """vLLM's reason for `err` in one line: the first line of its message, or a pydantic
    error's `Value error, ...` line (its first line only counts the errors), without the
    advice of a memory refusal (the caller names the run's knob: `kv_cache_knob`), bounded.
    The bound keeps the numbers of a KV cache refusal (needed, available, the estimated
    maximum length), which come before its advice."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    line = next((line for line in lines if line.startswith("Value error, ")), lines[0])
    line = line.removeprefix("Value error, ").split(_VLLM_MEMORY_ADVICE, 1)[0]
    return cut_to(line, _MAX_REASON_CHARS)


def kv_cache_knob(device: torch.device, gpu_memory_utilization: float) -> str:
    """What sets the memory vLLM gives its KV cache on `device`: on CPU the environment
    variable VLLM_CPU_KVCACHE_SPACE (GiB; the engine sets 1 where it is unset), which
    overrides rollout.gpu_memory_utilization there; on a GPU that key."""
    if device.type == "cpu":
        space = os.environ.get(CPU_KV_CACHE_VARIABLE) or str(DEFAULT_CPU_KV_CACHE_GIB)
        return f"the environment variable {CPU_KV_CACHE_VARIABLE} (GiB, now {space})"
    return f"rollout.gpu_memory_utilization (now {gpu_memory_utilization:g})"


@contextmanager
def vllm_failures(failed: str, close: Callable[[], None] | None = None) -> Iterator[None]:
    """Any exception a vLLM call raises as one VLLMRolloutError line, `failed: vLLM's
    reason`, in place of its traceback: vLLM raises its own classes (a VLLMValidationError
    is neither a ValueError nor a RuntimeError), a TypeError where its API moved, and
    anything its engine core meets. `close` shuts the engine down first, while the process
    group its shutdown tears down still exists. Memory runs out as itself (the run's memory
    advice, not another engine); mfsdp's own errors pass as they are."""
    try:
        yield
    except (torch.OutOfMemoryError, MfsdpError):
        raise
    except Exception as err:
        close_all([close] if close is not None else [], err)
        raise VLLMRolloutError.of(f"{failed}: {vllm_reason(err)}") from None


def vllm_logs_to_stderr() -> None:
    """Send vLLM's log lines to stderr, as every other line of a run goes, unless the user
    chose a stream (VLLM_LOGGING_STREAM). vLLM writes them to stdout by default, where a
    run's result is: `mfsdp train grpo --json` printed the engine's INFO lines before its
    JSON object. Set before the engine applies its logging config (when it is created).
    The lines are escaped as ours are: vLLM wraps the log record factory it finds, which
    `cli.verbosity` set first."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")


def vllm_info_only_when_verbose() -> None:
    """vLLM's INFO lines only where mfsdp's own show (`mfsdp -v`), its warnings always, unless
    the user chose a level (VLLM_LOGGING_LEVEL). A short CPU run printed some 30 of them
    (platform, thread and kernel notes, "reset prefix cache" after every weight push) around
    a handful of its own lines. Set before vLLM is imported and before its engine applies its
    logging config: each reads the level then."""
    if logging.getLogger("trainer").getEffectiveLevel() > logging.INFO:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


class VLLMRolloutEngine(RolloutEngine):
    name = "vllm"

    def __init__(
        self,
        model_dir: str,
        dtype: ModelDType = "bfloat16",
        max_model_len: int = 1024,
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        enforce_eager: bool = False,
        cpu_kv_cache_gib: int = DEFAULT_CPU_KV_CACHE_GIB,
        load_format: str = "auto",
    ):
        """A vLLM `LLM` in this process. Multiprocessing is turned off so its worker is
        reachable for weight pushes (module docstring), and its log-probs are the model's
        raw ones, before any sampling setting changes them, so they compare with the actor's
        (`rollout/actor_logprob_diff`)."""
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault(CPU_KV_CACHE_VARIABLE, str(cpu_kv_cache_gib))
        vllm_logs_to_stderr()
        vllm_info_only_when_verbose()
        from vllm import LLM

        self.llm: LLM | None = LLM(
            model=str(model_dir),
            dtype=dtype,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enforce_eager=enforce_eager,
            logprobs_mode="raw_logprobs",
            load_format=load_format,  # "dummy": random weights, the trainer pushes the real ones
            trust_remote_code=False,  # the model dir's files are data (trainer/model_code.py)
        )
        self.eos_token_ids = _eos_ids(self.llm)
        self.pad_token_id = self.llm.get_tokenizer().pad_token_id or 0
        self._seed = seed

    def _worker(self):
        return self.llm.llm_engine.model_executor.driver_worker.worker

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        # A push may cover some layers only (a LoRA update sends the adapted ones); vLLM keeps
        # the others as they are and warns "Failed to load weights" for each, every step.
        reload_log = logging.getLogger("vllm.model_executor.model_loader.reload")
        level = reload_log.level
        reload_log.setLevel(logging.ERROR)
        assert self.llm is not None  # a closed engine takes no more calls
        with vllm_failures("vLLM failed to take the actor's weights", self.close):
            worker = self._worker()
            try:
                worker.reload_weights(weights_iterator=iter(weights))
            finally:
                reload_log.setLevel(level)
            model = worker.model_runner.get_model()
            if model.config.tie_word_embeddings and worker.device.type == "cpu":
                model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
            self.llm.reset_prefix_cache()

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> RolloutBatch:
        """All responses of one step in one `LLM.generate` call, so vLLM schedules them
        together. A seeded request's n samples get seeds seed, seed+1, ... seed+n-1 (vLLM gives
        each child of a request `seed + index`), so request k starts at base + k x n: no
        two completions of a step share a seed, and a step's seed reproduces its rollouts."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        # vLLM samples greedily only with n = 1, so greedy n > 1 repeats the prompt instead.
        copies = params.n if params.greedy else 1
        per_request = 1 if params.greedy else params.n
        base_seed = params.seed if params.seed is not None else self._seed
        requests, sampling = [], []
        refused = "vLLM refused the sampling settings (rollout.temperature, top_p, top_k)"
        with vllm_failures(refused, self.close):
            for index, prompt in enumerate(prompts):
                for copy in range(copies):
                    requests.append(TokensPrompt(prompt_token_ids=list(prompt)))
                    sampling.append(
                        VLLMSamplingParams(
                            n=per_request,
                            temperature=params.temperature,
                            top_p=params.top_p,
                            top_k=params.top_k,
                            max_tokens=params.max_tokens,
                            seed=None
                            if params.greedy
                            else base_seed + (index * copies + copy) * params.n,
                            logprobs=0 if params.logprobs else None,
                            stop_token_ids=self.eos_token_ids,
                            detokenize=False,
                        )
                    )
        assert self.llm is not None  # a closed engine takes no more calls
        with vllm_failures("vLLM failed to generate", self.close):
            outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        responses, logprobs, prompt_index = [], [], []
        for request_index, output in enumerate(outputs):
            for completion in output.outputs:
                tokens = list(completion.token_ids)
                responses.append(tokens)
                prompt_index.append(request_index // copies)
                if params.logprobs:
                    # asked for (logprobs=0), they come: one {token: Logprob} per step
                    steps = cast("list[dict[int, Logprob]]", completion.logprobs)
                    logprobs.append([step[token].logprob for step, token in zip(steps, tokens)])
        return pack_responses(
            responses, logprobs if params.logprobs else None, prompt_index, self.pad_token_id
        )

    def close(self) -> None:
        """Shut vLLM's engine down now rather than when it is collected: its finalizer
        destroys process groups, and one run at exit, after a failed run tore the trainer's
        group down, was a second traceback."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
        self.llm = None


def _eos_ids(llm) -> list[int]:
    """End-of-sequence ids from the model's generation config, else the tokenizer's."""
    config = llm.llm_engine.model_config
    eos = getattr(config.hf_config, "eos_token_id", None)
    generation = (
        config.try_get_generation_config() if hasattr(config, "try_get_generation_config") else {}
    )
    eos = generation.get("eos_token_id", eos)
    if eos is None:
        eos = llm.get_tokenizer().eos_token_id
    return [eos] if isinstance(eos, int) else list(eos)
