"""What a user coming from torchtitan, HF or verl types by habit: a subcommand without its
group (`mfsdp export-hf`), an option given as a command (`mfsdp version`), a trainer mfsdp
does not have (`mfsdp train ppo`), and dtype spellings torch and HF use (`bfloat16`)."""

from __future__ import annotations

import sys

import pytest

from cli.main import main


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`mfsdp ARGS` through the console entry point (where usage errors are reported)."""
    monkeypatch.setattr(sys, "argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as done:
        main()
    captured = capsys.readouterr()
    return int(done.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(
    "args, meant",
    [
        (["export-hf", "runs/demo", "--out", "hf"], "mfsdp ckpt export-hf"),
        (["validate", "runs/demo"], "mfsdp ckpt validate"),
        (["sft", "--config", "x.yaml"], "mfsdp train sft"),
        (["gsm8k", "--input", "x"], "mfsdp data gsm8k"),
        (["train", "ckpt"], "mfsdp ckpt"),
        (["version"], "mfsdp --version"),
    ],
)
def test_a_command_given_at_the_wrong_level_names_the_full_command(
    monkeypatch, capsys, args, meant
):
    code, out, err = _run_main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert f"(did you mean '{meant}'?); see 'mfsdp" in err, err
    assert err.endswith(" --help'\n") and err.count("\n") == 1, err


def test_a_command_with_no_close_name_lists_the_commands_there(monkeypatch, capsys):
    code, _out, err = _run_main(monkeypatch, capsys, "train", "ppo")
    assert (code, err) == (
        2,
        "error: No such command 'ppo' for 'mfsdp train'; its commands: grpo, sft;"
        " see 'mfsdp train --help'\n",
    )


def test_a_wrong_level_command_under_json_is_one_json_object(monkeypatch, capsys):
    import json

    code, out, _err = _run_main(monkeypatch, capsys, "inspect", "runs/demo", "--json")
    assert code == 2
    assert json.loads(out)["error"].endswith(
        "(did you mean 'mfsdp ckpt inspect'?); see 'mfsdp --help'"
    )


# ------------------------------------------------------------------ dtype spellings


def _safetensors_dtypes(model_dir) -> set[str]:
    """The dtypes the header of every safetensors file in `model_dir` records."""
    import json as json_module
    import struct

    found = set()
    for path in model_dir.glob("*.safetensors"):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json_module.loads(handle.read(length))
        found |= {entry["dtype"] for name, entry in header.items() if name != "__metadata__"}
    return found


@pytest.mark.parametrize(
    "spelt, stored",
    [("bfloat16", "BF16"), ("BF16", "BF16"), ("torch.float16", "F16"), ("half", "F16")],
)
def test_export_and_import_take_the_dtype_as_torch_and_hf_spell_it(tmp_path, spelt, stored):
    from click.testing import CliRunner

    from cli.main import app
    from tests.support.paths import FIXTURES
    from trainer.tiny import build_tiny_model_dir

    exported = tmp_path / "hf"
    done = CliRunner().invoke(
        app,
        [
            "ckpt",
            "export-hf",
            str(FIXTURES / "megatron_fsdp_qwen2" / "run"),
            "--out",
            str(exported),
            "--dtype",
            spelt,
        ],
    )
    assert done.exit_code == 0, done.output
    assert _safetensors_dtypes(exported) == {stored}
    source = build_tiny_model_dir(tmp_path / "model", with_weights=True)
    done = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(tmp_path / "dcp"), "--dtype", spelt]
    )
    assert done.exit_code == 0, done.output


def test_a_dtype_no_spelling_reaches_is_refused_naming_the_choices(monkeypatch, capsys):
    code, _out, err = _run_main(
        monkeypatch, capsys, "ckpt", "export-hf", "x", "--out", "y", "--dtype", "fp8"
    )
    assert code == 2 and "'fp8' is not one of 'auto', 'bf16', 'fp16', 'fp32'" in err


@pytest.mark.parametrize(
    "command, key", [("sft", "strategy.mixed_precision"), ("grpo", "rollout.dtype")]
)
def test_a_dtype_config_key_takes_torch_spellings(command, key):
    from trainer.config import ConfigError, SFTConfig, load_config
    from trainer.grpo.config import GRPOConfig

    cls = SFTConfig if command == "sft" else GRPOConfig
    for spelt, meant in [("bfloat16", "bf16"), ("torch.float32", "fp32"), ("FP32", "fp32")]:
        section, name = key.split(".")
        assert getattr(getattr(load_config(cls, None, [f"{key}={spelt}"]), section), name) == meant
    with pytest.raises(ConfigError, match=rf"'{key}' expects one of auto \| bf16 \| fp32"):
        load_config(cls, None, [f"{key}=fp8"])


# ------------------------------------------------------------------ config keys from elsewhere


@pytest.mark.parametrize(
    "given, first",
    [
        ("optim.learning_rate", "optim.lr"),  # HF TrainingArguments, torchtitan
        ("learning_rate", "optim.lr"),
        ("optim.wd", "optim.weight_decay"),
        ("optim.lrr", "optim.lr"),  # a typo still finds the close name
    ],
)
def test_an_unknown_key_suggests_the_key_it_abbreviates_or_spells_out_first(given, first):
    from trainer.config import ConfigError, SFTConfig, load_config

    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [f"{given}=1"])
    assert f"unknown config key '{given}'; did you mean {first}" in str(err.value)


def test_a_verl_key_mfsdp_does_not_map_is_named_whole_with_mfsdps_own(tmp_path):
    """Was: "unknown config key 'actor_rollout_ref'; did you mean actor.kl_loss_coef?"."""
    from trainer.config import ConfigError, load_config
    from trainer.grpo.config import GRPOConfig

    yaml_file = tmp_path / "verl.yaml"
    yaml_file.write_text("actor_rollout_ref:\n  rollout:\n    max_response_length: 64\n")
    for source, overrides, config in [
        ("command-line override", ["actor_rollout_ref.rollout.max_response_length=64"], None),
        (str(yaml_file), [], yaml_file),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config(GRPOConfig, config, overrides)
        assert str(err.value) == (
            f"{source}: verl key 'actor_rollout_ref.rollout.max_response_length' is not one"
            " mfsdp maps (docs/verl.md); did you mean rollout.max_response_length?"
        )
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, ["actor_rollout_ref.rollout.nothing=1"])
    assert str(err.value).endswith("; `mfsdp config defaults grpo` lists mfsdp's keys")


# ------------------------------------------------------------------ Hub ids for local dirs

HUB_HINT = (
    "; if that is a Hugging Face Hub id: nothing is downloaded here, so fetch it first "
    "(`hf download Qwen/Qwen2.5-0.5B --local-dir Qwen2.5-0.5B`) and give {give_as}Qwen2.5-0.5B"
)


def test_a_hub_id_as_model_path_says_how_to_fetch_it(tmp_path, monkeypatch):
    from trainer.config import ConfigError, SFTConfig, load_config
    from trainer.local_paths import check_local_paths
    from trainer.model_source import resolve_model_source

    monkeypatch.chdir(tmp_path)
    for key in ("model.path", "model.hf_config", "model.tokenizer"):
        cfg = load_config(SFTConfig, None, [f"{key}=Qwen/Qwen2.5-0.5B"])
        with pytest.raises(ConfigError) as err:
            resolve_model_source(cfg.model)  # model.path, as the launch checks it
            check_local_paths(cfg)
        assert str(err.value).startswith(f"{key}: Qwen/Qwen2.5-0.5B does not exist (")
        assert str(err.value).endswith(HUB_HINT.format(give_as=f"{key}="))


@pytest.mark.parametrize(
    "command, give_as",
    [
        (["ckpt", "import-hf", "Qwen/Qwen2.5-0.5B", "--out", "o"], ""),
        (
            ["ckpt", "export-hf", "RUN", "--hf-config", "Qwen/Qwen2.5-0.5B", "--out", "o"],
            "--hf-config ",
        ),
        (["ckpt", "validate", "RUN", "--hf-config", "Qwen/Qwen2.5-0.5B"], "--hf-config "),
    ],
)
def test_a_hub_id_given_to_a_ckpt_command_says_how_to_fetch_it(
    tmp_path, monkeypatch, capsys, command, give_as
):
    from tests.support.paths import FIXTURES

    monkeypatch.chdir(tmp_path)
    run = str(FIXTURES / "megatron_fsdp_qwen2" / "run")
    code, _out, err = _run_main(monkeypatch, capsys, *[run if w == "RUN" else w for w in command])
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {give_as}Qwen/Qwen2.5-0.5B: no such ")
    assert err.endswith(HUB_HINT.format(give_as=give_as) + "\n"), err
    assert not (tmp_path / "o").exists()


def test_a_mistyped_local_path_with_one_slash_gets_no_hub_hint(tmp_path, monkeypatch):
    from mfsdp_ckpt.format.hub_id import hub_id_hint

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert hub_id_hint("runs/sft_typo", "") == ""  # runs/ is here: a local path
    assert hub_id_hint("/models/Qwen2.5-7B", "") == ""  # absolute: not an id
    assert hub_id_hint("Qwen/Qwen2.5-0.5B", "") != ""


# ------------------------------------------------------------ overrides as other CLIs take them


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["examples/sft_tiny_cpu.yaml"],
            "override 'examples/sft_tiny_cpu.yaml': give a config file as --config "
            "examples/sft_tiny_cpu.yaml",
        ),
        (
            ["--config", "examples/sft_tiny_cpu.yaml", "trainer.total_steps", "2"],
            "override 'trainer.total_steps': expected key=value; write trainer.total_steps=2",
        ),
        (
            ["--config", "examples/sft_tiny_cpu.yaml", "--trainer.total_steps=2"],
            "No such option '--trainer.total_steps' for 'mfsdp train sft': config overrides are "
            "written without dashes, as trainer.total_steps=VALUE",
        ),
        (["--config", "examples/sft_tiny_cpu.yaml", "fast"], "override 'fast': expected key=value"),
    ],
)
def test_an_override_written_as_other_tools_take_it_says_how_mfsdp_takes_it(
    monkeypatch, capsys, args, line
):
    from tests.support.paths import REPO

    monkeypatch.chdir(REPO)
    code, _out, err = _run_main(monkeypatch, capsys, "train", "sft", *args)
    assert code == 2 and err.startswith(f"error: {line}") and err.count("\n") == 1, err


# -------------------------------------------------------- dataset files as the Hub names them


def test_a_hub_dataset_file_makes_the_split_its_name_says(tmp_path):
    """openai/gsm8k downloads as main/train-00000-of-00001.parquet: the tables were named
    sft/train-00000-of-00001.parquet, where the example configs read sft/train.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from cli.main import app
    from trainer.tiny import synthetic_arithmetic

    rows = synthetic_arithmetic(6, seed=1)
    table = pa.table({key: [row[key] for row in rows] for key in ("question", "answer")})
    inputs = []
    for split in ("train", "test"):
        inputs += ["--input", str(tmp_path / "main" / f"{split}-00000-of-00001.parquet")]
        (tmp_path / "main").mkdir(exist_ok=True)
        pq.write_table(table, inputs[-1])
    done = CliRunner().invoke(app, ["data", "gsm8k", *inputs, "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    written = sorted(
        str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.parquet")
    )
    assert written == [
        "rl/test.parquet",
        "rl/train.parquet",
        "sft/test.parquet",
        "sft/train.parquet",
    ]
    extra = pq.read_table(tmp_path / "out" / "rl" / "train.parquet").column("extra_info")
    assert {row["split"] for row in extra.to_pylist()} == {"train"}


def test_a_dataset_directory_as_input_names_the_files_to_give(tmp_path, monkeypatch, capsys):
    """`hf download openai/gsm8k --repo-type dataset` leaves gsm8k/main/*.parquet; the
    directory itself was refused as click's "File ... is a directory"."""
    main_dir = tmp_path / "gsm8k" / "main"
    main_dir.mkdir(parents=True)
    for name in ("train-00000-of-00001.parquet", "test-00000-of-00001.parquet", "README.json"):
        (main_dir / name).write_bytes(b"")
    out = tmp_path / "out"
    code, _out, err = _run_main(
        monkeypatch, capsys, "data", "gsm8k", "--input", str(tmp_path / "gsm8k"), "--out", str(out)
    )
    assert code == 2 and not out.exists()
    assert err == (
        f"error: {tmp_path / 'gsm8k'}: a directory; give its data files, one --input each: "
        f"--input {main_dir / 'test-00000-of-00001.parquet'} "
        f"--input {main_dir / 'train-00000-of-00001.parquet'}\n"
    )
    code, _out, err = _run_main(
        monkeypatch, capsys, "data", "math", "--input", str(tmp_path), "--out", str(out), "--json"
    )  # the tables lie two levels down: too deep to list
    assert (
        code == 2
        and err == f"error: {tmp_path}: a directory; give a data file (.parquet, .jsonl or .json)\n"
    )


def test_a_hub_dataset_id_as_input_says_how_to_fetch_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _out, err = _run_main(
        monkeypatch, capsys, "data", "gsm8k", "--input", "openai/gsm8k", "--out", "out"
    )
    assert code == 2
    assert err == (
        "error: openai/gsm8k: no such file or directory; relative paths are read from "
        f"{tmp_path}; if that is a Hugging Face Hub id: nothing is "
        "downloaded here, so fetch it first (`hf download openai/gsm8k --repo-type dataset "
        "--local-dir gsm8k`) and give its files under gsm8k/ as --input\n"
    )


def _hub_shards(root, split: str, count: int, rows_each: int) -> list[str]:
    """A GSM8K split as the Hub serves a large one: `count` parquet shards of distinct rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.tiny import synthetic_arithmetic

    root.mkdir(exist_ok=True)
    paths = []
    for index in range(count):
        rows = synthetic_arithmetic(rows_each, seed=index + 1)
        table = pa.table({key: [row[key] for row in rows] for key in ("question", "answer")})
        paths.append(str(root / f"{split}-{index:05d}-of-{count:05d}.parquet"))
        pq.write_table(table, paths[-1])
    return paths


def test_the_hub_shards_of_one_split_make_one_table_in_shard_order(tmp_path):
    """A split the Hub serves in shards (train-00000-of-00002, train-00001-of-00002), given
    in any order, is one sft/train.parquet: the shards' rows in shard order, indices counting
    on (they were refused as two inputs making one split)."""
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from cli.main import app

    shards = _hub_shards(tmp_path / "main", "train", 2, 3)
    inputs = [arg for path in reversed(shards) for arg in ("--input", path)]
    done = CliRunner().invoke(app, ["data", "gsm8k", *inputs, "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    rl = pq.read_table(tmp_path / "out" / "rl" / "train.parquet").to_pylist()
    questions = [q for path in shards for q in pq.read_table(path).column("question").to_pylist()]
    assert [row["extra_info"]["question"] for row in rl] == questions
    assert [row["extra_info"]["index"] for row in rl] == list(range(6))
    sft = pq.read_table(tmp_path / "out" / "sft" / "train.parquet").to_pylist()
    assert [row["extra_info"]["index"] for row in sft] == list(range(6))


def test_a_split_given_without_all_its_shards_names_the_missing_one(tmp_path):
    """Two of three shards would make a train table that looks whole: refused naming the
    shard not given, unless --split says to convert these alone."""
    from click.testing import CliRunner

    from cli.main import app

    shards = _hub_shards(tmp_path / "main", "train", 3, 2)
    inputs = ["--input", shards[0], "--input", shards[2], "--out", str(tmp_path / "out")]
    done = CliRunner().invoke(app, ["data", "gsm8k", *inputs])
    assert done.exit_code == 2, done.output
    assert "train-00001-of-00003 is not given; give every shard" in done.output, done.output
    assert not (tmp_path / "out").exists()
    done = CliRunner().invoke(app, ["data", "gsm8k", *inputs, "--split", "part"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "out" / "sft" / "part.parquet").is_file()
