"""`mfsdp config from-verl` on launch scripts as verl publishes them (tests/fixtures/
verl_scripts, copied unchanged): the values that reach the config, the notes on what the
script decides only when it runs, and that the YAML written loads as `mfsdp train` reads it."""

from pathlib import Path

import pytest

from tests.support.paths import REPO
from trainer.config import SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import Conversion, VerlSourceError, convert_verl
from trainer.verl_inert_keys import PADDING

SCRIPTS = REPO / "tests" / "fixtures" / "verl_scripts"
FORWARDED = "the script passes its own arguments on to verl"


def loads(conversion: Conversion, tmp_path: Path) -> GRPOConfig | SFTConfig:
    """The conversion's YAML, read the way `mfsdp train grpo|sft --config` reads it."""
    path = tmp_path / f"{conversion.command}.yaml"
    path.write_text(conversion.to_yaml("script"))
    return load_config(GRPOConfig if conversion.command == "grpo" else SFTConfig, path)


def dropped_keys(conversion: Conversion) -> set[str]:
    return {item.split("=", 1)[0] for item in conversion.dropped}


def test_fsdp_grpo_script_with_path_variables_in_a_list(tmp_path, monkeypatch):
    """`$HOME` takes this environment's value, as the shell running the script here would:
    left as written, the config was refused by training ("nothing expands here") and the
    comment said to set the variable, which a config never reads."""
    monkeypatch.setenv("HOME", "/home/someone")
    conversion = convert_verl(SCRIPTS / "run_qwen2-7b_math.sh")
    cfg = loads(conversion, tmp_path)
    assert cfg.data.train_files == [
        "/home/someone/data/gsm8k/train.parquet",
        "/home/someone/data/math/train.parquet",
    ]
    assert (
        "$HOME: taken from this environment, as the shell running the script here would"
        in conversion.notes
    )
    assert (cfg.optim.lr, cfg.rollout.n, cfg.actor.ppo_mini_batch_size) == (1e-6, 5, 256)
    assert cfg.trainer.logger == ["console", "wandb"] and cfg.checkpoint.save_every == 20
    assert any(note.startswith("$@: " + FORWARDED) for note in conversion.notes)


def test_the_environment_fills_only_converted_values_and_no_note_quotes_it(tmp_path, monkeypatch):
    """A script's `wandb login $WANDB_API_KEY` beside its verl command, or a key not carried
    over that holds it, put the key into a comment of the config it converted to (a file
    people share)."""
    monkeypatch.setenv("WANDB_API_KEY", "sk-not-to-be-shared")
    monkeypatch.setenv("HOME", "/home/someone")
    script = tmp_path / "run.sh"
    script.write_text(
        "wandb login $WANDB_API_KEY\n"
        "python3 -m verl.trainer.main_ppo data.train_files=$HOME/d/train.parquet"
        " actor_rollout_ref.model.path=/m trainer.total_epochs=1"
        " +ray_kwargs.ray_init.runtime_env.env_vars.WANDB_API_KEY=$WANDB_API_KEY\n"
    )
    conversion = convert_verl(script)
    assert "sk-not-to-be-shared" not in conversion.to_yaml("script")
    assert loads(conversion, tmp_path).data.train_files == ["/home/someone/d/train.parquet"]


def test_megatron_grpo_script_names_its_model_parallel_sizes(tmp_path):
    conversion = convert_verl(SCRIPTS / "run_qwen2-7b_math_megatron.sh")
    cfg = loads(conversion, tmp_path)
    assert (cfg.model.path, cfg.data.train_batch_size) == ("Qwen/Qwen2-7B-Instruct", 1024)
    assert {
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
    } <= dropped_keys(conversion)
    # `mode=$rollout_mode`, the script's "async": verl's only mode, on-policy as here
    assert "actor_rollout_ref.rollout.mode" not in dropped_keys(conversion)


def test_overrides_grouped_in_bash_arrays_are_read(tmp_path):
    """verl's newer scripts write `DATA=( ... )` and pass `"${DATA[@]}"`: read as no keys,
    the config came out `{}` at exit 0."""
    conversion = convert_verl(SCRIPTS / "run_qwen2-7b_math_megatron_lora.sh")
    cfg = loads(conversion, tmp_path)
    assert (cfg.data.max_prompt_length, cfg.data.train_batch_size, cfg.data.shuffle) == (
        1024,
        128,
        False,
    )
    assert (cfg.actor.ppo_mini_batch_size, cfg.rollout.n, cfg.trainer.experiment_name) == (
        16,
        4,
        "qwen2_7b_megatron_lora",
    )
    assert cfg.rollout.name == "vllm" and cfg.trainer.val_before_train is False
    # the array's `+...override_transformer_config.recompute_*=` keys: read, recomputation only
    assert (
        "verl's actor_rollout_ref.actor.megatron.override_transformer_config is ignored:"
        " recomputation" in "\n".join(conversion.notes)
    )
    assert any(note.startswith("$@: " + FORWARDED) for note in conversion.notes)


def test_array_appends_and_an_array_the_script_does_not_set(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "N=8\nA=(actor_rollout_ref.rollout.n=$N  # group size\n"
        "   trainer.project_name=p)\nA+=(trainer.experiment_name=e)\n"
        'python3 -m verl.trainer.main_ppo "${A[@]}" "${B[@]}" trainer.total_epochs=2\n'
    )
    conversion = convert_verl(script)
    assert conversion.tree["rollout"] == {"n": 8}
    trainer = conversion.tree["trainer"]
    assert (trainer["project_name"], trainer["experiment_name"], trainer["epochs"]) == ("p", "e", 2)
    assert any(
        note.startswith("${B[@]}: an array the script does not set") for note in conversion.notes
    )


def test_an_argument_default_is_used_and_named(tmp_path):
    """`ENGINE=${1:-vllm}` then `rollout.name=$ENGINE`: kept as `${1:-vllm}`, it was refused
    as "sglang is not supported"; nested defaults (`${A:-$ALL_OFFLOAD}`) resolve too."""
    conversion = convert_verl(SCRIPTS / "run_qwen2_5_vl-7b-megatron.sh")
    cfg = loads(conversion, tmp_path)
    assert cfg.rollout.name == "vllm"
    assert "${1:-vllm}: the script's argument $1; its default 'vllm' is used here" in (
        conversion.notes
    )
    # ALL_OFFLOAD=${ALL_OFFLOAD:-True} reaches param_offload through two defaults
    assert (
        "actor_rollout_ref.actor.megatron.param_offload=True: CPU offload is not supported yet"
        in (conversion.dropped)
    )


def test_a_variable_set_neither_in_the_script_nor_here_is_left_to_edit(tmp_path, monkeypatch):
    monkeypatch.delenv("HOME", raising=False)
    conversion = convert_verl(SCRIPTS / "run_qwen2-7b_math.sh")
    assert loads(conversion, tmp_path).data.train_files[0] == "$HOME/data/gsm8k/train.parquet"
    assert any(
        note.startswith("data.train_files=")
        and note.endswith(
            "a shell variable with no value here (not set by the script, or set only as it"
            " runs), and a config expands none: edit the path"
        )
        for note in conversion.notes
    ), conversion.notes


def test_arithmetic_and_nested_defaults_in_a_script_piped_to_tee(tmp_path, monkeypatch):
    """`max_prompt_length=$((1024 * 2))` was split into three words and never set, and the
    `${max_prompt_length}` left in the command failed the whole conversion (exit 2)."""
    monkeypatch.setenv("HOME", "/home/someone")
    for name in ("TRAIN_FILE", "RAY_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    conversion = convert_verl(SCRIPTS / "run_qwen2-32b_sglang_fsdp_npu.sh")
    cfg = loads(conversion, tmp_path)
    assert (cfg.data.max_prompt_length, cfg.rollout.max_response_length) == (2048, 8192)
    # TRAIN_FILE=${TRAIN_FILE:-"${RAY_DATA_HOME}/..."}, RAY_DATA_HOME=${...:-"${HOME}/verl"}
    assert cfg.data.train_files == ["/home/someone/verl/datasets/deepscaler/train.parquet"]
    assert "actor_rollout_ref.rollout.name" in dropped_keys(conversion)  # sglang


def test_sft_script_run_by_torchrun_with_positional_arguments(tmp_path):
    conversion = convert_verl(SCRIPTS / "run_gemma_2b.sh")
    cfg = loads(conversion, tmp_path)
    assert conversion.command == "sft"
    assert (cfg.model.path, cfg.data.micro_batch_size, cfg.trainer.epochs) == (
        "google/gemma-2b-it",
        4,
        2,
    )
    assert "trainer.run_dir=$2: an argument the script is run with: edit the value" in (
        conversion.notes
    )
    assert (cfg.data.prompt_dict_keys, cfg.data.response_dict_keys) == (["question"], ["answer"])
    assert not {"data.prompt_dict_keys", "data.response_dict_keys"} & dropped_keys(conversion)


def test_gsm8k_sft_script_reads_question_and_answer_of_verls_gsm8k_parquet(tmp_path):
    """verl's GSM8K SFT example trains on `extra_info.question` -> `extra_info.answer` of the
    parquet its gsm8k.py preprocessing writes; the dict keys were dropped, and each row's
    whole extra_info struct became the prompt and the answer as its Python repr."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.data.chat import row_limit, tokenize_prompt_response
    from trainer.data.sft_dataset import load_sft_splits
    from trainer.tiny import build_tokenizer

    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"Q{i} Let's think step by step."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {
                "split": "train",
                "index": i,
                "answer": f"#### {i}",
                "question": f"Q{i}",
            },
        }
        for i in range(3)
    ]
    parquet = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    cfg = loads(convert_verl(SCRIPTS / "run_qwen_05_sp2.sh"), tmp_path)
    cfg.data.train_files, cfg.data.val_files = [str(parquet)], []
    tokenizer = build_tokenizer()
    train, _ = load_sft_splits(cfg.data, tokenizer, seed=0, progress=False)
    expected = [
        tokenize_prompt_response(
            tokenizer,
            [{"role": "user", "content": f"Q{i}"}],
            f"#### {i}",
            row_limit(tokenizer, "data.max_length", cfg.data.max_length),
        ).input_ids
        for i in range(3)
    ]
    assert [example.input_ids for example in train] == expected


def test_sft_keys_after_the_forwarded_arguments_are_read(tmp_path):
    conversion = convert_verl(SCRIPTS / "run_qwen_05_sp2.sh")
    cfg = loads(conversion, tmp_path)
    assert cfg.trainer.experiment_name == "gsm8k-sft-qwen-2.5-0.5b-instruct-sp2"
    assert "ulysses_sequence_parallel_size" in dropped_keys(conversion)
    assert f"verl's use_remove_padding is ignored: {PADDING}" in conversion.notes


def test_a_number_known_only_when_the_script_runs_is_dropped_not_fatal(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
        " data.max_prompt_length=${LEN} "
        "actor_rollout_ref.rollout.n=$((2 * 3)) trainer.default_local_dir=$CKPT\n"
    )
    conversion = convert_verl(script)
    assert (
        conversion.tree["rollout"] == {"n": 6} and conversion.tree["trainer"]["run_dir"] == "$CKPT"
    )
    assert "max_prompt_length" not in conversion.tree["data"]  # given, not verl's default
    assert conversion.dropped[0].startswith("data.max_prompt_length=${LEN}: known only when")
    assert loads(conversion, tmp_path).rollout.n == 6


def test_an_unterminated_array_reads_no_keys_and_says_so(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("A=(trainer.project_name=p\npython3 -m verl.trainer.main_ppo\n")
    with pytest.raises(VerlSourceError, match=r"no `python3 -m verl\.trainer\.main_ppo"):
        convert_verl(script)


def test_a_hydra_config_file_and_a_second_launch_are_noted(tmp_path):
    """Both were left out without a word: the YAML's settings, and every launch but the last."""
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo --config-path=cfg --config-name my_grpo"
        " actor_rollout_ref.actor.optim.lr=1e-6\n"
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.optim.lr=5e-6\n"
    )
    conversion = convert_verl(script)
    assert loads(conversion, tmp_path).optim.lr == 5e-6
    assert any(note.startswith("the script starts verl 2 times") for note in conversion.notes)
    script.write_text(
        "python3 -m verl.trainer.main_ppo --config-path=cfg --config-name my_grpo"
        " actor_rollout_ref.actor.optim.lr=1e-6\n"
    )
    notes = convert_verl(script).notes
    assert "--config-path cfg, --config-name my_grpo: verl loads its settings" in " ".join(notes)


def test_a_dollar_in_single_quotes_is_passed_as_written(tmp_path):
    """bash expands nothing inside single quotes: `'...=run_$LR'` reaches verl as written
    (it became run_5)."""
    script = tmp_path / "run.sh"
    script.write_text(
        "LR=5\npython3 -m verl.trainer.main_ppo 'trainer.experiment_name=run_$LR'"
        ' "trainer.project_name=p_$LR"\n'
    )
    cfg = loads(convert_verl(script), tmp_path)
    assert (cfg.trainer.experiment_name, cfg.trainer.project_name) == ("run_$LR", "p_5")
