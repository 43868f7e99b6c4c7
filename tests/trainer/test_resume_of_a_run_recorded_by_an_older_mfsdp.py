"""A run dir whose config.yaml was written by an older mfsdp, which lacks the keys added
since, resumed by this one (was: each added key was a change, `data.prompt_dict_keys None ->
[]`, so a resume with the same command said "settings changed" and kept a copy of the
config, and the one setting the user did change was hidden behind "(+N more)").

The older record is made as an older mfsdp wrote it: a run's own config.yaml with the keys
it did not have taken out."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config_history import OwnConfigError
from trainer.sft import run_sft

STEPS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256", "trainer.total_steps=4")
# more keys than a note names (six), each before `trainer` in key order
ADDED_SINCE = (
    "data.prompt_dict_keys",
    "data.response_dict_keys",
    "model.liger",
    "model.lora_alpha",
    "model.lora_rank",
    "model.target_modules",
    "model.loss_chunk_tokens",
    "optim.fused",
)


def _as_an_older_mfsdp_wrote_it(config_file: Path, extra: dict[str, dict] | None = None) -> None:
    """Take the keys of ADDED_SINCE out of `config_file`, and add the sections' keys in
    `extra` (keys the older mfsdp had that this one has not)."""
    recorded = yaml.safe_load(config_file.read_text())
    for dotted in ADDED_SINCE:
        section, key = dotted.split(".")
        del recorded[section][key]
    for section, keys in (extra or {}).items():
        recorded[section].update(keys)
    config_file.write_text(yaml.safe_dump(recorded, sort_keys=False))


def _older_run(tmp_path: Path, extra: dict[str, dict] | None = None) -> tuple[Path, Path]:
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *STEPS, "trainer.stop_at_step=2"))
    _as_an_older_mfsdp_wrote_it(run / "config.yaml", extra)
    return data, run


def test_the_same_command_resuming_an_older_run_says_nothing_changed(tmp_path, capsys):
    data, run = _older_run(tmp_path)
    capsys.readouterr()
    run_sft(tiny_config(data, run, *STEPS))
    assert "settings changed" not in capsys.readouterr().err
    assert not list(run.glob("config.until_step_*.yaml"))


def test_the_setting_changed_is_named_first_and_a_new_key_set_after_it(tmp_path, capsys):
    data, run = _older_run(tmp_path)
    capsys.readouterr()
    run_sft(tiny_config(data, run, *STEPS, "trainer.total_steps=5", "model.loss_chunk_tokens=512"))
    kept = run / "config.until_step_2.yaml"
    assert (
        "[sft] resumed with settings changed since step 2: trainer.total_steps 4 -> 5,"
        " new key model.loss_chunk_tokens = 512;"
        f" the config step 2 was trained with is kept as {kept}\n"
    ) in capsys.readouterr().err
    assert "loss_chunk_tokens" not in kept.read_text()  # the record, as it was


def test_a_recorded_key_this_mfsdp_no_longer_has_is_named_once(tmp_path, capsys):
    data, run = _older_run(tmp_path, {"model": {"retired_setting": 3}})
    capsys.readouterr()
    run_sft(tiny_config(data, run, *STEPS))
    err = capsys.readouterr().err
    assert (
        "resumed with settings changed since step 2: model.retired_setting = 3 (no longer a key);"
    ) in err, err
    assert err.count("retired_setting") == 1, err
    assert (run / "config.until_step_2.yaml").is_file()


def test_a_step_resumed_into_a_run_dir_recorded_by_an_older_mfsdp_with_its_settings(
    tmp_path, capsys
):
    """The run dir's config.yaml records the same settings in an older mfsdp's keys: it is
    replaced as the same settings, not refused as the user's (`OwnConfigError`)."""
    data, base = _older_run(tmp_path)
    new = tmp_path / "new"
    new.mkdir()
    (new / "config.yaml").write_bytes((base / "config.yaml").read_bytes())
    capsys.readouterr()
    try:
        run_sft(tiny_config(data, new, *STEPS, f"checkpoint.resume={base / 'global_step_2'}"))
    except OwnConfigError as err:
        raise AssertionError(f"refused: {err}") from None
    assert f"{new / 'config.yaml'} (the same settings) is replaced" in capsys.readouterr().err
